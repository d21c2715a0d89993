// The grow op (ops::Grow, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// Rare: a pool grows seldom.
int ops::Grow::weight(const WeightSite& s) { return s.has(KVWELD_CAP_POOL_OPS) ? std::min(s.first, 3) : 0; }

// A server grows its pool within a memory budget: here, four times what
// every sequence full would take, the pool's size as the block model has
// it (the simulator's own account), without one as the engine reports it.
std::vector<int> ops::Grow::eligible(const Simulator& s) {
    if (!can(s, KVWELD_CAP_POOL_OPS)) return {};
    if (!can(s, KVWELD_CAP_BLOCKS)) return kOne;
    const int budget = 4 * std::max(s.config().seqs * s.config().n_ctx, 1);
    const BlockModel* blocks = s.block_model();
    const kvweld_pool_info info = blocks ? kvweld_pool_info{} : s.pool_info();
    const std::int64_t positions = blocks ? std::int64_t(blocks->n_blocks()) * blocks->block_size()
                                          : std::int64_t(info.n_blocks) * info.block_size;
    return when(positions < budget);
}
ops::Grow ops::Grow::draw(const Simulator&, Entropy&, std::uint32_t) { return {}; }
void ops::Grow::write(json&, const ops::Grow&) {}
ops::Grow ops::Grow::read(const json&) { return {}; }

void Simulator::run(const ops::Grow&, int) {
    make(calls::PoolOp{KVWELD_POOL_GROW});
    publish(calls::PoolOp{KVWELD_POOL_GROW});
}

}  // namespace kvweld::sim
