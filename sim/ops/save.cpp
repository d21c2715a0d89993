// The save op (ops::Save, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// The state stream's second pair, shared with load: on about half the seeds.
int ops::Save::weight(const WeightSite& s) { return s.has(KVWELD_CAP_STATE) ? s.own(kStateStream, 1, 1, 12, 0.5) : 0; }

std::vector<int> ops::Save::eligible(const Simulator& s) {
    return can(s, KVWELD_CAP_STATE) ? with_history(s) : std::vector<int>{};
}
ops::Save ops::Save::draw(const Simulator&, Entropy&, std::uint32_t pick) { return {pick}; }
void ops::Save::write(json& j, const ops::Save& a) { j["pick"] = a.pick; }
ops::Save ops::Save::read(const json& j) { return {json_field<std::uint32_t>(j, "pick")}; }

// The engine's bytes; the twin or peer keeps its own (Lockstep), the data
// shadow the reference's (DataShadow).
void Simulator::run(const ops::Save&, int seq) {
    SavedState state{engine_->state_save(seq), *requests_[std::size_t(seq)], weights_seed_, ++states_saved_};
    publish(calls::Save{seq, state.id});
    saved_.push_back(std::move(state));
    if (saved_.size() > std::size_t(kSavedStates)) saved_.erase(saved_.begin());
}

}  // namespace kvweld::sim
