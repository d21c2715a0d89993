// A second engine driven in lockstep with the one under test: the same
// model, and every memory call, save, load, refusal and decode made of it
// too, right after the engine's. As the twin (oracle_twin.cpp) it is the
// same engine with plan reuse off; as kvweld diff's peer (oracle_peer.cpp)
// another engine, release or setting. It trusts nothing either engine
// says about itself: it compares what they return.
#include "sim/observers.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

namespace kvweld::sim {

using namespace targets;

Lockstep::Lockstep(const World& world, Judge& judge, RunStats& stats, std::unique_ptr<Engine> second, Role role,
                   double peer_tolerance, bool peer_counts)
    : world_(world), judge_(judge), stats_(stats), second_(std::move(second)), role_(role),
      peer_tolerance_(peer_tolerance), peer_counts_(peer_counts) {
    require(second_->vocab() == world.config.model.vocab, role == Role::peer ? "peer engine " : "twin engine ",
            second_->name(), " reports vocab ", second_->vocab(), " for a model of vocab ", world.config.model.vocab);
}

// Each engine keeps its own bytes of a saved state.
void Lockstep::on_call(const MemoryCall& call) {
    on_second([&] {
        if (const auto* save = std::get_if<calls::Save>(&call)) {
            saved_[save->id] = second_->state_save(save->seq);
            // As many as the simulator keeps (the oldest go first).
            while (saved_.size() > std::size_t(kSavedStates)) saved_.erase(saved_.begin());
        } else if (const auto* load = std::get_if<calls::Load>(&call)) {
            second_->state_load(load->seq, saved_.at(load->id));
        } else if (!std::holds_alternative<calls::LoadRefused>(call)) {
            second_->apply(call);
        }
    });
}

// The second engine is refused the same call first, so whatever a refusal
// does to an engine's layout (a state load put back) happens to both.
void Lockstep::expect_refusal(const std::function<void(Engine&)>& call, const std::string& what) {
    try {
        call(*second_);
    } catch (const Error&) {
        return;
    }
    judge_.fail(Verdict::engine_error, role_ == Role::peer ? Oracle::peer : Oracle::twin,
                cat(name(), " accepted ", what, ": it must be refused"));
}

void Lockstep::expect_refused_load(int seq, int id, const std::string& what) {
    expect_refusal([&](Engine& e) { e.state_load(seq, saved_.at(id)); }, what);
}

void Lockstep::before_decode(const Batch&) {
    if (role_ != Role::peer || !peer_counts_) return;
    engine_before_ = world_.engine.counters();
    second_before_ = on_second([&] { return second_->counters(); });
}

// kvweld diff: where engine A refuses a decode, the peer is asked the same;
// if it refuses too the run ends there with no difference (ended_early
// says why); a refusal of A's alone is one.
void Lockstep::on_engine_refused(const Batch& b, const Error& mine) {
    if (role_ != Role::peer) return;
    try {
        second_->decode(b.seqs, b.tokens, b.outputs);
    } catch (const Error& theirs) {
        ended_early_ = cat("both engines refused the decode at op ", judge_.op_index(), " (", to_string(judge_.op_kind()),
                           "): engine A (", world_.config.engine.engine, "): ", mine.what(), "; engine B (",
                           world_.config.engine.peer->engine, "): ", theirs.what());
        throw Judge::Stop{};
    }
}

std::vector<float> Lockstep::decode_second(const Batch& b) {
    if (b.abort_after >= 0) on_second([&] { second_->set_abort(b.abort_after); });
    return on_second([&] { return second_->decode(b.seqs, b.tokens, b.outputs); });
}

void Lockstep::on_decode(Decoded& d) {
    std::vector<float> theirs;
    try {
        theirs = decode_second(d.batch);
    } catch (const Aborted& e) {
        judge_.fail_in_call(Verdict::stale_decode, Oracle::twin,
                            cat(name(), "'s abort callback (armed as the engine's: after ", d.batch.abort_after,
                                ") stopped a call the engine ran to its end: ", e.what()));
    }
    require(theirs.size() == d.got.size(), name(), " returned ", theirs.size(), " floats of logits where the engine returned ",
            d.got.size());
    compare_sampled(d);
    if (role_ == Role::peer) return compare_peer(d, theirs);
    compare_twin(d, theirs);
    d.twin_rows = theirs;
}

void Lockstep::on_aborted(const Batch& called, Decoded& kept) {
    try {
        decode_second(called);
    } catch (const Aborted&) {
        for (const auto& [id, n] : kept_lengths(called, kept.batch))
            if (const int seq = id, theirs = on_second([&] { return second_->seq_length(seq); }); theirs != n)
                judge_.fail(Verdict::stale_decode, role_ == Role::peer ? Oracle::peer : Oracle::twin,
                            cat("after the call the abort callback stopped (after ", called.abort_after, "), sequence ",
                                seq, " holds ", n, " positions in the engine and ", theirs, " in ", name()));
        return;
    }
    judge_.fail(Verdict::stale_decode, role_ == Role::peer ? Oracle::peer : Oracle::twin,
                cat(name(), " ran to its end the call the engine's abort callback stopped (both armed: after ",
                    called.abort_after, ")"));
}

// ABI 11: the same calls with the same seeds sample the same tokens, row
// for row (-1 where neither has a chain), whatever plans either reused.
void Lockstep::compare_sampled(const Decoded& d) {
    if (d.sampled.empty() || !(second_->capabilities() & KVWELD_CAP_SAMPLERS)) return;
    std::size_t row = 0;
    for (const Pair& pair : d.batch.pairs) {
        if (!pair.output) continue;
        const std::size_t i = row++;
        const int theirs = on_second([&] { return second_->sampled(int(i)); });
        if (theirs == d.sampled[i]) {
            stats_.sampled_compared += theirs >= 0;
            continue;
        }
        const std::string what = cat("sequence ", pair.seq, " position ", pair.pos, " (row ", i, "): sampled token ",
                                     d.sampled[i], ", ", name(), " sampled ", theirs);
        if (role_ == Role::peer) judge_.fail(Verdict::rows_differ, Oracle::peer, what);
        judge_.fail_in_call(Verdict::stale_decode, Oracle::twin, what);
    }
}

// A row of a sequence with a sampler chain is compared by its token only
// (compare_sampled): either engine may leave its logits unfilled
// (engine_abi.h, set_sampler).
bool Lockstep::chained(const Pair& pair) const { return world_.samplers.count(pair.seq) > 0; }

void Lockstep::after_op(OpKind kind) {
    recent_ops_.emplace_back(judge_.op_index(), kind);
    if (recent_ops_.size() > 3) recent_ops_.erase(recent_ops_.begin());
}

}  // namespace kvweld::sim
