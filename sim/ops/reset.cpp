// The reset op (ops::Reset, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// Rare: a reset drops the whole pool.
int ops::Reset::weight(const WeightSite& s) { return s.has(KVWELD_CAP_POOL_OPS) ? std::min(s.first, 3) : 0; }

std::vector<int> ops::Reset::eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_POOL_OPS)); }
ops::Reset ops::Reset::draw(const Simulator&, Entropy&, std::uint32_t) { return {}; }
void ops::Reset::write(json&, const ops::Reset&) {}
ops::Reset ops::Reset::read(const json&) { return {}; }

void Simulator::run(const ops::Reset&, int) {
    make(calls::PoolOp{KVWELD_POOL_RESET});
    requeue_all();
    publish(calls::PoolOp{KVWELD_POOL_RESET});
}

}  // namespace kvweld::sim
