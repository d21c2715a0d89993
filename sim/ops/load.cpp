// The load op (ops::Load, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
// ways, and what it does (Simulator::run).

#include "sim/ops/invalid_call.hpp"
#include "sim/ops/row_parts.hpp"
#include "sim/ops/weight_site.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvweld::sim {

using namespace row;

// The state stream's second pair, shared with save.
int ops::Load::weight(const WeightSite& s) { return s.has(KVWELD_CAP_STATE) ? s.own(kStateStream, 1, 1, 12, 0.5) : 0; }

// A saved state to load, and somewhere to load it.
std::vector<int> ops::Load::eligible(const Simulator& s) {
    return when(can(s, KVWELD_CAP_STATE) && s.saved_states() > 0);
}
ops::Load ops::Load::draw(const Simulator&, Entropy& e, std::uint32_t pick) {
    ops::Load a{.state = pick, .to = e.pick()};
    a.onto_open = e.chance(0.4);
    return a;
}
void ops::Load::write(json& j, const ops::Load& a) {
    j.update({{"state", a.state}, {"to", a.to}});
    if (a.onto_open) j["onto_open"] = true;
}
ops::Load ops::Load::read(const json& j) {
    return {json_field<std::uint32_t>(j, "state"), json_field<std::uint32_t>(j, "to"), optional_flag(j, "onto_open")};
}

// Into a free sequence (opened for it: a conversation brought back), or
// with onto_open (or none free) an open one, whose positions it replaces.
// A state saved under other weights, or longer than the destination holds,
// must be refused, naming why, and the destination keeps what it held.
void Simulator::run(const ops::Load& op, int) {
    const SavedState& state = saved_[op.state % saved_.size()];
    std::vector<int> open;
    for (int s = 0; s < config_.seqs; ++s)
        if (requests_[std::size_t(s)]) open.push_back(s);
    const std::vector<int> free = free_seqs();
    const bool onto_open = (op.onto_open && !open.empty()) || free.empty();
    const int dst = (onto_open ? open : free)[op.to % (onto_open ? open : free).size()];
    const int capacity = onto_open ? requests_[std::size_t(dst)]->capacity : config_.n_ctx;
    const int len = int(state.request.history.size());
    const bool other_model = state.weights_seed != weights_seed_;
    if (other_model || len > capacity) {
        if (!onto_open) return;  // a refusal is judged on a sequence whose content it must keep
        const std::string why = other_model ? "a state saved under other weights"
                                            : cat("a state of ", len, " positions into a sequence of ", capacity);
        const std::string named = other_model ? "model" : std::to_string(capacity);
        // The twin or peer is refused it too (a refusal may move cells: both alike).
        for (const auto& o : observers_) o->expect_refused_load(dst, state.id, why);
        try {
            engine_->state_load(dst, state.bytes);
        } catch (const Error& e) {
            if (std::string(e.what()).find(named) == std::string::npos)
                judge_.fail(Verdict::engine_error, Oracle::engine,
                            cat("the engine refused ", why, " without naming the ", named, ": ", e.what()));
            ++stats_.refused;
            drew(op, "refused");
            return;
        }
        judge_.fail(Verdict::engine_error, Oracle::engine, cat("the engine accepted ", why, ": it must be refused"));
    }
    if (!onto_open) {
        make(calls::Open{dst});
        requests_[std::size_t(dst)].emplace();
        publish(calls::Open{dst});
    }
    const calls::Load call{dst, len, state.id};
    make(call);  // a refusal carries the rule's clause for the state
    if (onto_open) drew(op, "onto_open");
    else drew(op, "into_free");
    Request& r = *requests_[std::size_t(dst)];
    r = state.request;
    r.capacity = capacity;
    publish(call);
    ++stats_.requests;
}

// Invalid: the sequence's own state, cut short: corrupt bytes must not half-load.
std::optional<InvalidCall> ops::Load::cut_short(const InvalidSite& s) {
    if (!(s.capabilities & KVWELD_CAP_STATE) || s.len == 0) return std::nullopt;
    const std::size_t size = s.state_size();
    const std::size_t keep = size - 1 - std::size_t(s.v % std::min<std::size_t>(size, 64));
    return InvalidCall{cat("a state load of ", keep, " bytes (the sequence's own state, cut short)"),
                       std::to_string(keep),
                       [seq = s.seq, keep](Engine& e) {
                           std::vector<std::uint8_t> cut = e.state_save(seq);
                           cut.resize(std::min(keep, cut.size()));
                           e.state_load(seq, cut);
                       },
                       "", true};
}

}  // namespace kvweld::sim
