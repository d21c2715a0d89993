#include "sim/ops.hpp"

#include "engine/cat.hpp"
#include "engine/enum_names.hpp"
#include "engine/error.hpp"

#include "sim/json_field.hpp"

#include <nlohmann/json.hpp>

#include <array>

namespace kvweld::sim {

namespace {
constexpr NameTable<OpKind, kOpKinds> kOpNames{{
    {OpKind::admit, "admit"},
    {OpKind::decode, "decode"},
    {OpKind::spec, "spec"},
    {OpKind::retire, "retire"},
    {OpKind::clear, "clear"},
    {OpKind::set_layer, "set_layer"},
    {OpKind::truncate, "truncate"},
    {OpKind::reload, "reload"},
    {OpKind::migrate, "migrate"},
}};
}  // namespace

std::string_view to_string(OpKind k) { return name_in(kOpNames, k); }
OpKind op_kind_from_string(std::string_view s) { return parse_in(kOpNames, s, "op"); }

void to_json(nlohmann::json& j, const Op& op) {
    j = nlohmann::json::object();
    j["op"] = to_string(op.kind);
    switch (op.kind) {
        case OpKind::admit:
            j["pick"] = op.pick;
            j["prompt"] = op.tokens;
            j["fresh"] = op.fresh;
            j["accept"] = op.accept;
            j["max_new"] = op.max_new;
            j["capacity"] = op.pick2;
            j["seed"] = op.seed;
            break;
        case OpKind::decode: j["pick"] = op.pick; j["seed"] = op.seed; break;
        case OpKind::spec:
            j["pick"] = op.pick;
            j["drafts"] = op.tokens;
            j["m"] = op.m;
            j["seed"] = op.seed;
            break;
        case OpKind::retire:
        case OpKind::clear: j["pick"] = op.pick; break;
        case OpKind::set_layer: j["pick"] = op.pick; j["layer"] = op.layer; break;
        case OpKind::truncate: j["pick"] = op.pick; j["length"] = op.length; break;
        case OpKind::reload: j["same_weights"] = op.same_weights; j["seed"] = op.seed; break;
        case OpKind::migrate: j["pick"] = op.pick; j["to"] = op.pick2; break;
    }
}

namespace {

std::vector<int> tokens_field(const nlohmann::json& j, const char* name) {
    auto tokens = json_field<std::vector<int>>(j, name);
    for (int t : tokens) require(t >= 0, "field '", name, "' holds a negative token ", t);
    return tokens;
}

}  // namespace

Op op_from_json(const nlohmann::json& j) {
    require(j.is_object(), "an op must be a JSON object");
    Op op;
    op.kind = op_kind_from_string(json_field<std::string>(j, "op"));
    switch (op.kind) {
        case OpKind::admit:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.tokens = tokens_field(j, "prompt");
            require(!op.tokens.empty(), "field 'prompt' is empty: a request needs a prompt");
            op.fresh = json_field<bool>(j, "fresh");
            op.accept = json_field<float>(j, "accept");
            require(op.accept >= 0.0f && op.accept <= 1.0f,
                    "field 'accept' = ", op.accept, ": must be in [0, 1]");
            op.max_new = json_field<int>(j, "max_new");
            require(op.max_new >= 0, "field 'max_new' = ", op.max_new, ": must be >= 0");
            op.pick2 = json_field<std::uint32_t>(j, "capacity");
            op.seed = json_field<std::uint64_t>(j, "seed");
            break;
        case OpKind::decode:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.seed = json_field<std::uint64_t>(j, "seed");
            break;
        case OpKind::spec:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.tokens = tokens_field(j, "drafts");
            op.m = json_field<int>(j, "m");
            require(op.m >= 0 && op.m <= static_cast<int>(op.tokens.size()),
                    "field 'm' = ", op.m, ": must be in 0..", op.tokens.size(), " (drafts)");
            op.seed = json_field<std::uint64_t>(j, "seed");
            break;
        case OpKind::retire:
        case OpKind::clear: op.pick = json_field<std::uint32_t>(j, "pick"); break;
        case OpKind::set_layer:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.layer = json_field<int>(j, "layer");
            require(op.layer >= 0, "field 'layer' = ", op.layer, ": must be >= 0");
            break;
        case OpKind::truncate:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.length = json_field<std::uint32_t>(j, "length");
            break;
        case OpKind::reload:
            op.same_weights = json_field<bool>(j, "same_weights");
            op.seed = json_field<std::uint64_t>(j, "seed");
            break;
        case OpKind::migrate:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.pick2 = json_field<std::uint32_t>(j, "to");
            break;
    }
    return op;
}

}  // namespace kvweld::sim
