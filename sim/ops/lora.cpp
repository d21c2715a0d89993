// The lora op (ops::Lora, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
// ways, and what it does (Simulator::run).

#include "sim/ops/invalid_call.hpp"
#include "sim/ops/row_parts.hpp"
#include "sim/ops/weight_site.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvweld::sim {

using namespace row;

// On the main stream after the config's shape, on about 60% of the seeds.
int ops::Lora::weight(const WeightSite& s) {
    return s.has(KVWELD_CAP_LORA) && s.main.chance(0.6) ? int(s.main.range(1, 20)) : 0;
}

std::vector<int> ops::Lora::eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_LORA)); }
// Scales from a few values, so that a set comes back with the same
// scales (no change), with others (step data), or at 0 (adds nothing).
ops::Lora ops::Lora::draw(const Simulator&, Entropy& e, std::uint32_t) {
    ops::Lora a;
    for (int i = 0; i < kLoraPool; ++i)
        if (e.chance(0.4)) {
            a.adapters.push_back(i);
            a.scales.push_back(std::array{0.0f, 0.5f, 1.0f, 2.0f}[e.below(4)]);
        }
    return a;
}
void ops::Lora::write(json& j, const ops::Lora& a) { j.update({{"adapters", a.adapters}, {"scales", a.scales}}); }
ops::Lora ops::Lora::read(const json& j) {
    ops::Lora a{non_negative(j, "adapters"), json_field<std::vector<float>>(j, "scales")};
    require(a.scales.size() == a.adapters.size(), "field 'scales' holds ", a.scales.size(), " values for ",
            a.adapters.size(), " adapters");
    for (std::size_t i = 0; i < a.adapters.size(); ++i) {
        require(a.adapters[i] < kLoraPool, "field 'adapters' holds ", a.adapters[i], ": a run has adapters 0..",
                kLoraPool - 1);
        for (std::size_t k = 0; k < i; ++k)
            require(a.adapters[k] != a.adapters[i], "field 'adapters' holds ", a.adapters[i], " twice");
        require(std::isfinite(a.scales[i]) && std::fabs(a.scales[i]) <= 16.0f, "field 'scales' holds ",
                a.scales[i], ": must be finite, at most 16 in size");
    }
    return a;
}

void Simulator::run(const ops::Lora& op, int) {
    std::vector<LoraUse> uses;
    for (std::size_t i = 0; i < op.adapters.size() && i < op.scales.size(); ++i)
        uses.push_back({lora_pool_[std::size_t(op.adapters[i]) % lora_pool_.size()], op.scales[i]});
    make(calls::SetLoras{uses, nullptr, nullptr});
    if (uses.empty()) drew(op, "none");
    else drew(op, "set");
    const Adapters before = adapters_;
    adapters_.set_loras(config_.model, uses);
    publish(calls::SetLoras{uses, &before, &adapters_});
}

// Invalid: a LoRA adapter with another width of a matrix it adapts:
// ffn_down's input, or (an MoE model's adapters leave ffn_down alone)
// attn_v's output.
std::optional<InvalidCall> ops::Lora::other_shape(const InvalidSite& s) {
    if (!(s.capabilities & KVWELD_CAP_LORA)) return std::nullopt;
    ModelConfig other = s.model;
    const bool moe = other.moe();
    if (moe) other.n_kv_heads = other.n_kv_heads == other.n_heads ? other.n_heads / 2 : other.n_heads;
    else other.ffn_dim += 16 * (1 + int(s.v % 2));
    const int got = moe ? other.kv_dim() : other.ffn_dim, want = moe ? s.model.kv_dim() : s.model.ffn_dim;
    return InvalidCall{cat("a LoRA adapter for a model with ", moe ? "kv_dim " : "ffn ", got, " (the model's is ", want,
                           ")"),
                       moe ? cat("kv_heads=", other.n_kv_heads) : std::to_string(got),
                       [other, v = s.v](Engine& e) {
                           const LoraUse use{LoraAdapter::random(other, 1, 1.0f, v), 1.0f};
                           e.apply(calls::SetLoras{std::span<const LoraUse>(&use, 1), nullptr, nullptr});
                       },
                       moe ? "attn_v" : "ffn_down"};
}

}  // namespace kvweld::sim
