// The abort op (ops::Abort, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

namespace {

constexpr std::uint32_t kMaxAfter = 1u << 16;

}  // namespace

constexpr std::uint64_t kAbortStream = 0x61626f72742d6f70ULL;

// Where no peer runs beside the engine: on a stream of its own, on about a
// third of the seeds, rare where on (a server aborts a call seldom).
int ops::Abort::weight(const WeightSite& s) {
    return s.has(KVWELD_CAP_ABORT) && !s.config.engine.peer ? s.own(kAbortStream, 0, 1, 6, 0.35) : 0;
}

// Half the stops come early (in kvweld's engine, within the first tokens;
// in llama.cpp, within the first ubatch's graph), half anywhere up to a
// few thousand questions (a late one lets the call run to its end). Not
// with a peer: its engine asks its own questions.
std::vector<int> ops::Abort::eligible(const Simulator& s) {
    return when(can(s, KVWELD_CAP_ABORT) && !s.config().engine.peer);
}
ops::Abort ops::Abort::draw(const Simulator&, Entropy& e, std::uint32_t) {
    const std::uint64_t width = e.chance(0.5) ? 8 : std::uint64_t(1) << e.range(3, 12);
    return {std::uint32_t(e.below(width))};
}
void ops::Abort::write(json& j, const ops::Abort& a) { j["after"] = a.after; }
ops::Abort ops::Abort::read(const json& j) {
    ops::Abort a{json_field<std::uint32_t>(j, "after")};
    require(a.after <= kMaxAfter, "field 'after' = ", a.after, ": must be at most ", kMaxAfter);
    return a;
}

void Simulator::run(const ops::Abort& op, int) { abort_armed_ = op.after; }

}  // namespace kvweld::sim
