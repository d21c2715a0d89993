// The warmup op (ops::Warmup, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
// ways, and what it does (Simulator::run).

#include "sim/ops/row_parts.hpp"
#include "sim/ops/weight_site.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvweld::sim {

using namespace row;

// Where the seed decodes experts, from the MoE draw (weight_site.hpp).
int ops::Warmup::weight(const WeightSite& s) {
    const MoeDraw moe = draw_moe(s.config.seed);
    return s.config.model.moe() && s.has(KVWELD_CAP_WARMUP) && moe.warmup ? moe.weight : 0;
}

std::vector<int> ops::Warmup::eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_WARMUP)); }
ops::Warmup ops::Warmup::draw(const Simulator&, Entropy& e, std::uint32_t) { return {e.chance(0.5)}; }
void ops::Warmup::write(json& j, const ops::Warmup& a) { j["on"] = a.on; }
ops::Warmup ops::Warmup::read(const json& j) { return {json_field<bool>(j, "on")}; }

void Simulator::run(const ops::Warmup& op, int) {
    make(calls::SetWarmup{op.on, nullptr, nullptr});
    if (op.on) drew(op, "on");
    else drew(op, "off");
    const Adapters before = adapters_;
    adapters_.set_warmup(op.on);
    publish(calls::SetWarmup{op.on, &before, &adapters_});
}

}  // namespace kvweld::sim
