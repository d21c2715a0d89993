// The simulator's ops on sequence state the way servers move it: context
// shifts, state save and load, and steady-state phases. Each goes to the
// engine and its twin alike; the reference's shadow follows the shift on
// its own terms (every moved key rotated afresh from its raw row), and a
// load hands the request its saved shadow back, so the data oracle judges
// every later row of a shifted or restored sequence.
#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/simulator.hpp"

#include <algorithm>

namespace kvweld::sim {

// n_keep = keep mod the length, then half the positions after it dropped
// (llama-server's n_discard) or any count of them; `twice`: a second shift of the same
// sequence before its next decode, so rotations owed add up.
void Simulator::run(const ops::Shift& op, int seq) {
    for (int round = 0; round < (op.twice ? 2 : 1); ++round) {
        const int len = int(requests_[std::size_t(seq)]->history.size());
        if (len < 1) return;
        const int keep = int(op.keep % std::uint32_t(len)), after = len - keep;
        const std::uint32_t draw = op.discard >> (16 * round);
        const int discard = draw & 1 ? std::max(1, after / 2) : 1 + int((draw >> 1) % std::uint32_t(after));
        shift_once(seq, keep, keep + discard);
    }
}

void Simulator::shift_once(int seq, int p0, int p1) {
    Request& r = *requests_[std::size_t(seq)];
    const calls::Shift call{seq, p0, p1, int(r.history.size())};
    make(call);
    r.history.erase(r.history.begin() + p0, r.history.begin() + p1);
    publish(call);
    if (r.parked && r.queue.empty()) {  // the room it waited for
        r.queue.push_back(*r.parked);
        r.decoding = true;
        ++r.generated;
    }
    r.parked.reset();
}

// The engine's bytes; the twin or peer keeps its own (Lockstep), the data
// shadow the reference's (DataShadow).
void Simulator::run(const ops::Save&, int seq) {
    SavedState state{engine_->state_save(seq), *requests_[std::size_t(seq)], weights_seed_, ++states_saved_};
    publish(calls::Save{seq, state.id});
    saved_.push_back(std::move(state));
    if (saved_.size() > std::size_t(kSavedStates)) saved_.erase(saved_.begin());
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
    Request& r = *requests_[std::size_t(dst)];
    r = state.request;
    r.capacity = capacity;
    publish(call);
    ++stats_.requests;
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
