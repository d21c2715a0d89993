// The server op table's generic face (sim/server/server_ops.hpp): names and
// JSON over every kind; each kind's row is in sim/server/ops/<name>.cpp.
#include "sim/server/server_ops.hpp"

#include "sim/json_field.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <array>

namespace kvweld::sim::server {

namespace {

template <std::size_t... I>
constexpr auto make_names(std::index_sequence<I...>) {
    return std::array<std::string_view, sizeof...(I)>{std::variant_alternative_t<I, ServerOpArgs>::name...};
}
constexpr auto kNames = make_names(std::make_index_sequence<kServerOpKinds>{});

template <std::size_t I = 0>
ServerOp read_kind(std::size_t kind, const nlohmann::json& j) {
    if constexpr (I + 1 < std::size_t(kServerOpKinds)) {
        if (kind != I) return read_kind<I + 1>(kind, j);
    }
    return ServerOp{std::variant_alternative_t<I, ServerOpArgs>::read(j)};
}

constexpr std::array<std::string_view, 3> kActions{"save", "restore", "erase"};

}  // namespace

std::string_view to_string(ServerOpKind kind) { return kNames.at(std::size_t(kind)); }
std::string_view to_string(SlotAction action) { return kActions.at(std::size_t(action)); }

void to_json(nlohmann::json& j, const ServerOp& op) {
    j = nlohmann::json::object();
    j["op"] = to_string(op.kind());
    std::visit([&](const auto& a) { std::decay_t<decltype(a)>::write(j, a); }, op.args);
}

ServerOp server_op_from_json(const nlohmann::json& j) {
    require(j.is_object(), "a server op must be a JSON object");
    const std::string name = json_field<std::string>(j, "op");
    std::string known;
    for (std::size_t k = 0; k < kNames.size(); ++k) {
        if (kNames[k] == name) return read_kind(k, j);
        known += cat(k ? ", " : "", kNames[k]);
    }
    throw Error(cat("unknown server op '", name, "' (known: ", known, ")"));
}

void write_completion(nlohmann::json& j, const Completion& c) {
    j["slot"] = c.slot, j["prompt"] = c.prompt, j["n_predict"] = c.n_predict, j["n_cmpl"] = c.n_cmpl;
    j["stream"] = c.stream, j["cancel_after"] = c.cancel_after, j["temperature"] = c.temperature, j["seed"] = c.seed;
    j["lora"] = c.lora;
    if (c.n_keep != 0) j["n_keep"] = c.n_keep;
}

std::vector<float> read_scales(const nlohmann::json& j, const char* field) {
    const std::vector<float> scales = json_field<std::vector<float>>(j, field);
    require(scales.size() <= 8, "field '", field, "' has ", scales.size(), " scales: at most 8 adapters");
    for (float s : scales) require(s >= 0 && s <= 4, "field '", field, "' holds scale ", s, ": each in 0..4");
    return scales;
}

Completion read_completion(const nlohmann::json& j) {
    Completion c;
    c.slot = json_int_in(j, "slot", -1, 63);
    c.prompt = json_field<std::vector<int>>(j, "prompt");
    require(!c.prompt.empty(), "field 'prompt' is empty: a completion needs at least one token");
    c.n_predict = json_int_in(j, "n_predict", 1, 128);
    c.n_cmpl = json_int_in(j, "n_cmpl", 1, 64);
    c.stream = json_field<bool>(j, "stream");
    c.cancel_after = json_int_in(j, "cancel_after", 0, 64);
    require(c.cancel_after == 0 || c.stream, "field 'cancel_after' = ", c.cancel_after, ": only a streamed request is cancelled");
    c.temperature = json_field<double>(j, "temperature");
    require(c.temperature >= 0 && c.temperature <= 2, "field 'temperature' = ", c.temperature, ": must be in 0..2");
    c.seed = json_field<std::uint32_t>(j, "seed");
    // Traces before per-request LoRA have no field: their requests named no adapters.
    if (j.contains("lora")) c.lora = read_scales(j, "lora");
    c.n_keep = j.contains("n_keep") ? json_int_in(j, "n_keep", -1, 1 << 20) : 0;
    return c;
}

}  // namespace kvweld::sim::server
