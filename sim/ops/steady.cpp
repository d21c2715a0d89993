// The steady op (ops::Steady, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// The state stream's third pair, a third of it: one op plays many steps.
int ops::Steady::weight(const WeightSite& s) { return s.own(kStateStream, 2, 1, 12, 0.5) / 3; }

std::vector<int> ops::Steady::eligible(const Simulator& s) { return ops::Step::eligible(s); }
// Every sequence decoding asks the same: 1 (plain decode) or 1 + drafts.
ops::Steady ops::Steady::draw(const Simulator& s, Entropy& e, std::uint32_t) {
    ops::Steady a;
    const int k = e.chance(0.5) ? 1 : int(e.range(1, std::min(8, s.config().max_chunk)));
    a.wants = wants_for(s, [&] { return e.chance(0.9) ? k : 0; });
    a.seed = e.seed();
    a.steps = std::uint32_t(e.range(8, 64));
    return a;
}
void ops::Steady::write(json& j, const ops::Steady& a) {
    j.update({{"wants", a.wants}, {"seed", a.seed}, {"steps", a.steps}});
}
ops::Steady ops::Steady::read(const json& j) {
    ops::Steady a{non_negative(j, "wants"), json_field<std::uint64_t>(j, "seed"), json_field<std::uint32_t>(j, "steps")};
    require(a.steps >= 1 && a.steps <= std::uint32_t(kMaxSteadySteps), "field 'steps' = ", a.steps,
            ": must be in 1..", kMaxSteadySteps);
    return a;
}

// Steps in a row with the same asks, each with its own seed: once every
// sequence decodes, each call has the last one's shape.
bool Simulator::run(const ops::Steady& op, int) {
    bool fed = false;
    for (std::uint32_t i = 0; i < op.steps; ++i) {
        const ops::Step one{op.wants, op.seed + 0x9e3779b97f4a7c15ULL * (i + 1), false};
        if (!run(one, 0)) break;
        fed = true;
    }
    return fed;
}

}  // namespace kvweld::sim
