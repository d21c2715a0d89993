// The keep op (ops::Keep, sim/ops.hpp): its weight, when it may run, its draw, its JSON
// both ways, and what it does (Simulator::run).
#include "sim/ops/row_parts.hpp"
#include "sim/ops/weight_site.hpp"
#include "sim/simulator.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim {

using namespace row;

constexpr std::uint64_t kKeepStream = 0x6b6565702d6f7073ULL;

// On a stream of its own, on about a third of the seeds, rare where on (it
// empties every other sequence).
int ops::Keep::weight(const WeightSite& s) { return s.has(KVWELD_CAP_KEEP) ? s.own(kKeepStream, 0, 1, 4, 0.35) : 0; }

// Where another open sequence would lose something.
std::vector<int> ops::Keep::eligible(const Simulator& s) {
    if (!can(s, KVWELD_CAP_KEEP)) return {};
    const std::vector<int> open = any_open(s);
    return open.size() >= 2 ? open : std::vector<int>{};
}
ops::Keep ops::Keep::draw(const Simulator&, Entropy&, std::uint32_t pick) { return {pick}; }
void ops::Keep::write(json& j, const ops::Keep& a) { j["pick"] = a.pick; }
ops::Keep ops::Keep::read(const json& j) { return {json_field<std::uint32_t>(j, "pick")}; }

// The engine empties every other sequence (they stay open); the simulator
// queues the history of each one that held some again, as a server
// re-prefills a request.
void Simulator::run(const ops::Keep&, int seq) {
    std::vector<int> emptied;
    for (int s = 0; s < config_.seqs; ++s)
        if (s != seq && requests_[std::size_t(s)] && !requests_[std::size_t(s)]->history.empty()) emptied.push_back(s);
    const calls::Keep call{seq, emptied};
    make(call);
    for (int s : emptied) requeue_from(*requests_[std::size_t(s)], 0);
    publish(call);
}

}  // namespace kvweld::sim
