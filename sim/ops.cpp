#include "sim/ops.hpp"

#include "engine/enum_names.hpp"
#include "sim/json_field.hpp"

#include <nlohmann/json.hpp>

#include <cmath>

namespace kvweld::sim {

namespace {
constexpr NameTable<OpKind, kOpKinds> kServeOpNames{{
    {OpKind::admit, "admit"},
    {OpKind::step, "step"},
    {OpKind::truncate, "truncate"},
    {OpKind::preempt, "preempt"},
    {OpKind::fork, "fork"},
    {OpKind::retire, "retire"},
    {OpKind::clear_all, "clear_all"},
    {OpKind::reload, "reload"},
    {OpKind::swap_layer, "swap_layer"},
    {OpKind::compact, "compact"},
    {OpKind::grow, "grow"},
    {OpKind::reset, "reset"},
    {OpKind::invalid, "invalid"},
    {OpKind::migrate, "migrate"},
    {OpKind::lora, "lora"},
    {OpKind::cvec, "cvec"},
    {OpKind::warmup, "warmup"},
    {OpKind::shift, "shift"},
    {OpKind::save, "save"},
    {OpKind::load, "load"},
    {OpKind::steady, "steady"},
}};

std::vector<int> non_negative(const nlohmann::json& j, const char* name) {
    auto values = json_field<std::vector<int>>(j, name);
    for (int v : values) require(v >= 0, "field '", name, "' holds a negative value ", v);
    return values;
}
// A rewrite is written only when drawn (its seed with it).
void add_rewrite(nlohmann::json& j, const Op& op) {
    if (!op.rewrite) return;
    j["rewrite"] = true;
    j["seed"] = op.seed;
}

void read_loras(const nlohmann::json& j, Op& op) {
    op.adapters = non_negative(j, "adapters");
    op.scales = json_field<std::vector<float>>(j, "scales");
    require(op.scales.size() == op.adapters.size(), "field 'scales' holds ", op.scales.size(), " values for ",
            op.adapters.size(), " adapters");
    for (std::size_t i = 0; i < op.adapters.size(); ++i) {
        require(op.adapters[i] < kLoraPool, "field 'adapters' holds ", op.adapters[i], ": a run has adapters 0..",
                kLoraPool - 1);
        for (std::size_t k = 0; k < i; ++k)
            require(op.adapters[k] != op.adapters[i], "field 'adapters' holds ", op.adapters[i], " twice");
        require(std::isfinite(op.scales[i]) && std::fabs(op.scales[i]) <= 16.0f, "field 'scales' holds ",
                op.scales[i], ": must be finite, at most 16 in size");
    }
}

void read_cvec(const nlohmann::json& j, Op& op) {
    op.clear = j.contains("clear") && json_field<bool>(j, "clear");
    if (op.clear) return;
    op.seed = json_field<std::uint64_t>(j, "seed");
    op.layer = json_field<int>(j, "start");
    op.layer_end = json_field<int>(j, "end");
    require(op.layer >= 0 && op.layer_end >= 0, "fields 'start' = ", op.layer, " and 'end' = ", op.layer_end,
            ": must be >= 0");
}

void read_rewrite(const nlohmann::json& j, Op& op) {
    op.rewrite = j.contains("rewrite") && json_field<bool>(j, "rewrite");
    if (op.rewrite) op.seed = json_field<std::uint64_t>(j, "seed");
}

}  // namespace

std::string_view to_string(OpKind k) { return name_in(kServeOpNames, k); }
OpKind op_kind_from_string(std::string_view s) { return parse_in(kServeOpNames, s, "op"); }

void to_json(nlohmann::json& j, const Op& op) {
    j = nlohmann::json::object();
    j["op"] = to_string(op.kind);
    switch (op.kind) {
        case OpKind::admit:
            j["pick"] = op.pick;
            j["prompt"] = op.tokens;
            j["max_new"] = op.max_new;
            j["capacity"] = op.pick2;
            j["recycle"] = op.recycle;
            break;
        case OpKind::migrate: j["pick"] = op.pick; j["to"] = op.pick2; break;
        case OpKind::step:
            j["wants"] = op.wants;
            j["seed"] = op.seed;
            if (op.last_only) j["outputs"] = "last";
            break;
        case OpKind::truncate: j["pick"] = op.pick; j["length"] = op.length; add_rewrite(j, op); break;
        case OpKind::fork:
            j["pick"] = op.pick;
            j["to"] = op.pick2;
            if (op.onto_open) j["onto_open"] = true;
            break;
        case OpKind::invalid: j["pick"] = op.pick; j["call"] = op.pick2; j["seed"] = op.seed; break;
        case OpKind::preempt: j["pick"] = op.pick; add_rewrite(j, op); break;
        case OpKind::retire: j["pick"] = op.pick; break;
        case OpKind::clear_all:
        case OpKind::compact:
        case OpKind::grow:
        case OpKind::reset: break;
        case OpKind::reload: j["same_weights"] = op.same_weights; j["seed"] = op.seed; break;
        case OpKind::swap_layer: j["pick"] = op.pick; j["layer"] = op.layer; break;
        case OpKind::lora: j["adapters"] = op.adapters; j["scales"] = op.scales; break;
        case OpKind::cvec:
            if (op.clear) j["clear"] = true;
            else j.update({{"seed", op.seed}, {"start", op.layer}, {"end", op.layer_end}});
            break;
        case OpKind::warmup: j["on"] = op.on; break;
        case OpKind::shift:
            j.update({{"pick", op.pick}, {"keep", op.length}, {"discard", op.pick2}});
            if (op.twice) j["twice"] = true;
            break;
        case OpKind::save: j["pick"] = op.pick; break;
        case OpKind::load:
            j["state"] = op.pick;
            j["to"] = op.pick2;
            if (op.onto_open) j["onto_open"] = true;
            break;
        case OpKind::steady: j.update({{"wants", op.wants}, {"seed", op.seed}, {"steps", op.length}}); break;
    }
}

Op op_from_json(const nlohmann::json& j) {
    require(j.is_object(), "an op must be a JSON object");
    Op op;
    op.kind = op_kind_from_string(json_field<std::string>(j, "op"));
    switch (op.kind) {
        case OpKind::admit:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.tokens = non_negative(j, "prompt");
            require(!op.tokens.empty(), "field 'prompt' is empty: a request needs a prompt");
            op.max_new = json_field<int>(j, "max_new");
            require(op.max_new >= 0, "field 'max_new' = ", op.max_new, ": must be >= 0");
            op.pick2 = json_field<std::uint32_t>(j, "capacity");
            op.recycle = json_field<bool>(j, "recycle");
            break;
        case OpKind::migrate:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.pick2 = json_field<std::uint32_t>(j, "to");
            break;
        case OpKind::step:
            op.wants = non_negative(j, "wants");
            op.seed = json_field<std::uint64_t>(j, "seed");
            if (j.contains("outputs")) {
                const std::string outputs = json_field<std::string>(j, "outputs");
                require(outputs == "last", "field 'outputs' = '", outputs, "': expected \"last\" (or no field: every row)");
                op.last_only = true;
            }
            break;
        case OpKind::truncate:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.length = json_field<std::uint32_t>(j, "length");
            read_rewrite(j, op);
            break;
        case OpKind::fork:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.pick2 = json_field<std::uint32_t>(j, "to");
            op.onto_open = j.contains("onto_open") && json_field<bool>(j, "onto_open");
            break;
        case OpKind::invalid:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.pick2 = json_field<std::uint32_t>(j, "call");
            op.seed = json_field<std::uint64_t>(j, "seed");
            break;
        case OpKind::preempt:
            op.pick = json_field<std::uint32_t>(j, "pick");
            read_rewrite(j, op);
            break;
        case OpKind::retire: op.pick = json_field<std::uint32_t>(j, "pick"); break;
        case OpKind::clear_all:
        case OpKind::compact:
        case OpKind::grow:
        case OpKind::reset: break;
        case OpKind::reload:
            op.same_weights = json_field<bool>(j, "same_weights");
            op.seed = json_field<std::uint64_t>(j, "seed");
            break;
        case OpKind::swap_layer:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.layer = json_field<int>(j, "layer");
            require(op.layer >= 0, "field 'layer' = ", op.layer, ": must be >= 0");
            break;
        case OpKind::lora: read_loras(j, op); break;
        case OpKind::cvec: read_cvec(j, op); break;
        case OpKind::warmup: op.on = json_field<bool>(j, "on"); break;
        case OpKind::shift:
            op.pick = json_field<std::uint32_t>(j, "pick");
            op.length = json_field<std::uint32_t>(j, "keep");
            op.pick2 = json_field<std::uint32_t>(j, "discard");
            op.twice = j.contains("twice") && json_field<bool>(j, "twice");
            break;
        case OpKind::save: op.pick = json_field<std::uint32_t>(j, "pick"); break;
        case OpKind::load:
            op.pick = json_field<std::uint32_t>(j, "state");
            op.pick2 = json_field<std::uint32_t>(j, "to");
            op.onto_open = j.contains("onto_open") && json_field<bool>(j, "onto_open");
            break;
        case OpKind::steady:
            op.wants = non_negative(j, "wants");
            op.seed = json_field<std::uint64_t>(j, "seed");
            op.length = json_field<std::uint32_t>(j, "steps");
            require(op.length >= 1 && op.length <= kMaxSteadySteps, "field 'steps' = ", op.length, ": must be in 1..",
                    kMaxSteadySteps);
            break;
    }
    return op;
}

}  // namespace kvweld::sim
