// The compact op (ops::Compact, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

int ops::Compact::weight(const WeightSite& s) { return s.has(KVWELD_CAP_POOL_OPS) ? s.first : 0; }

std::vector<int> ops::Compact::eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_POOL_OPS)); }
ops::Compact ops::Compact::draw(const Simulator&, Entropy&, std::uint32_t) { return {}; }
void ops::Compact::write(json&, const ops::Compact&) {}
ops::Compact ops::Compact::read(const json&) { return {}; }

void Simulator::run(const ops::Compact&, int) {
    make(calls::PoolOp{KVWELD_POOL_COMPACT});
    publish(calls::PoolOp{KVWELD_POOL_COMPACT});
}

}  // namespace kvweld::sim
