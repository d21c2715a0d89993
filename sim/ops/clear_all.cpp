// The clear_all op (ops::ClearAll, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// Rare by nature: a server seldom drops every request.
int ops::ClearAll::weight(const WeightSite& s) { return std::min(s.first, 3); }

std::vector<int> ops::ClearAll::eligible(const Simulator& s) { return any_open(s); }
ops::ClearAll ops::ClearAll::draw(const Simulator&, Entropy&, std::uint32_t) { return {}; }
void ops::ClearAll::write(json&, const ops::ClearAll&) {}
ops::ClearAll ops::ClearAll::read(const json&) { return {}; }

void Simulator::run(const ops::ClearAll&, int) {
    make(calls::ClearAll{});
    requeue_all();
    publish(calls::ClearAll{});
}

}  // namespace kvweld::sim
