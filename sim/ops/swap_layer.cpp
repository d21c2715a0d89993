// The swap_layer op (ops::SwapLayer, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

int ops::SwapLayer::weight(const WeightSite& s) { return s.has(KVWELD_CAP_SWAP_LAYER) ? s.first : 0; }

std::vector<int> ops::SwapLayer::eligible(const Simulator& s) {
    return can(s, KVWELD_CAP_SWAP_LAYER) ? any_open(s) : std::vector<int>{};
}
ops::SwapLayer ops::SwapLayer::draw(const Simulator& s, Entropy& e, std::uint32_t pick) {
    return {pick, int(e.below(std::uint64_t(s.config().model.n_layers)))};
}
void ops::SwapLayer::write(json& j, const ops::SwapLayer& a) { j.update({{"pick", a.pick}, {"layer", a.layer}}); }
ops::SwapLayer ops::SwapLayer::read(const json& j) {
    ops::SwapLayer a{json_field<std::uint32_t>(j, "pick"), json_field<int>(j, "layer")};
    require(a.layer >= 0, "field 'layer' = ", a.layer, ": must be >= 0");
    return a;
}

void Simulator::run(const ops::SwapLayer& op, int seq) {
    const calls::SwapLayer call{seq, op.layer % config_.model.n_layers};
    make(call);
    publish(call);
}

}  // namespace kvweld::sim
