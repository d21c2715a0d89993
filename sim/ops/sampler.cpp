// The sampler op (ops::SetSampler, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

constexpr std::uint64_t kSamplerStream = 0x73616d706c65722dULL;

// On a stream of its own, on about half the seeds.
int ops::SetSampler::weight(const WeightSite& s) {
    return s.has(KVWELD_CAP_SAMPLERS) ? s.own(kSamplerStream, 0, 1, 10, 0.5) : 0;
}

// A sampler chain for a sequence id: cleared a quarter of the time, else
// greedy or a narrow top-k, sometimes changed in place.
std::vector<int> ops::SetSampler::eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_SAMPLERS)); }
ops::SetSampler ops::SetSampler::draw(const Simulator& s, Entropy& e, std::uint32_t) {
    ops::SetSampler a;
    a.seq = std::uint32_t(e.below(std::size_t(s.config().seqs)));
    a.top_k = e.chance(0.25) ? -1 : e.chance(0.45) ? 0 : int(e.range(1, 8));
    a.seed = std::uint32_t(e.seed());
    a.in_place = e.chance(0.1);
    return a;
}
void ops::SetSampler::write(json& j, const ops::SetSampler& a) {
    j.update({{"seq", a.seq}, {"top_k", a.top_k}, {"seed", a.seed}, {"in_place", a.in_place}});
}
ops::SetSampler ops::SetSampler::read(const json& j) {
    ops::SetSampler a{json_field<std::uint32_t>(j, "seq"), json_field<int>(j, "top_k"),
                      json_field<std::uint32_t>(j, "seed"), optional_flag(j, "in_place")};
    require(a.top_k >= -1 && a.top_k <= kMaxTopK, "field 'top_k' = ", a.top_k, ": must be -1 (clear), 0 (greedy) or 1..",
            kMaxTopK);
    return a;
}

// In place only where the id holds a chain (the simulator's own account).
void Simulator::run(const ops::SetSampler& op, int) {
    const int seq = int(op.seq % std::uint32_t(config_.seqs));
    const bool held = samplers_.count(seq) > 0;
    const calls::SetSampler call{seq, op.top_k < 0 ? std::nullopt : std::optional<SamplerSpec>({op.top_k, op.seed}),
                                 op.in_place && held && op.top_k >= 0};
    make(call);
    if (call.in_place) drew(op, "in_place");
    else if (call.spec) drew(op, "new");
    else drew(op, "clear");
    if (call.spec) samplers_[seq] = *call.spec;
    else samplers_.erase(seq);
    publish(call);
}

// Invalid: a sampler chain wider than top-k allows or the vocabulary has.
std::optional<InvalidCall> ops::SetSampler::too_wide(const InvalidSite& s) {
    if (!(s.capabilities & KVWELD_CAP_SAMPLERS)) return std::nullopt;
    const int vocab = s.model.vocab, k = std::min(kMaxTopK, vocab) + 1 + int(s.v % 3);
    return InvalidCall{cat("a sampler chain of top_k ", k, " for sequence ", s.seq, " (vocab ", vocab, ")"),
                       std::to_string(k), [seq = s.seq, k, v = s.v](Engine& e) {
                           e.apply(calls::SetSampler{seq, SamplerSpec{k, std::uint32_t(v)}});
                       }};
}

}  // namespace kvweld::sim
