// The peer oracle, kvweld diff's: a second engine (another release,
// another setting, another plugin, or the same engine with a fault switch)
// opened on the same model and driven in lockstep through every op, the
// same tokens fed to both. Per call it compares what each engine's counters
// say it prepared (reused, built, rebound) and records every call where
// they differ, with the batch and the ops before it; per row, the two
// engines' logits (logit_error past the tolerance ends the run). It needs
// no reuse rule and no reference, so it works for any pair of engines; it
// says which calls and rows differ, not which engine is wrong.
#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/reference.hpp"
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

namespace kvweld::sim {

namespace {

Prepared prepared_between(const kvweld_engine_counters& a, const kvweld_engine_counters& b) {
    const auto delta = [](std::uint64_t after, std::uint64_t before) { return std::int64_t(after) - std::int64_t(before); };
    return {delta(b.reused, a.reused), delta(b.builds, a.builds), delta(b.rebound, a.rebound)};
}

std::string describe(const Prepared& p) { return cat("reused ", p.reused, ", built ", p.built, ", rebound ", p.rebound); }

}  // namespace

void Simulator::open_peer() {
    const PeerChoice& p = *config_.engine.peer;
    EngineSetup setup = config_.setup();
    setup.params = p.params;
    second_ = open_engine(p.engine, p.faults, setup, model_);
    peer_ = true;
    require(second_->vocab() == config_.model.vocab, "peer engine ", second_->name(), " reports vocab ",
            second_->vocab(), " for a model of vocab ", config_.model.vocab);
    // The peer is the run's oracle: nothing else judges, so a difference in
    // design between the two (another release's ubatch split) is reported
    // as a difference, never checked against one engine's rule.
    oracles_.all_off("kvweld diff: the peer engine is the oracle");
    rule_.reset();
    white_box_ = nullptr;
    spec_reject_fault_ = false;
    oracles_.peer = true;
    const bool peer_counts = second_->capabilities() & KVWELD_CAP_PLAN_COUNTERS;
    if (!counters_ || !peer_counts)
        oracles_.peer_reuse_why_not = cat(counters_ ? second_->name() : engine_->name(), " declares no plan counters");
}

void Simulator::check_peer(const std::vector<Pair>& pairs, const std::vector<float>& got,
                           const std::optional<kvweld_engine_counters>& before) {
    if (!peer_) return;
    std::vector<std::int32_t> seqs, tokens;
    for (const Pair& p : pairs) {
        seqs.push_back(p.seq);
        tokens.push_back(p.token);
    }
    const auto peer_before = on_second([&] { return second_->counters(); });
    const std::vector<float> theirs = on_second([&] { return second_->decode(seqs, tokens, output_flags(pairs)); });
    require(theirs.size() == got.size(), "the peer returned ", theirs.size(), " floats of logits where the engine returned ",
            got.size());
    // The call's reuse first: a row difference ends the run, and its message says how each prepared.
    std::optional<std::pair<Prepared, Prepared>> prepared;
    if (oracles_.peer_reuse_why_not.empty() && before && peer_before) {
        const auto engine_after = engine_->counters();
        const auto peer_after = on_second([&] { return second_->counters(); });
        require(engine_after && peer_after, "an engine stopped reporting its counters");
        const Prepared mine = prepared_between(*before, *engine_after), peer = prepared_between(*peer_before, *peer_after);
        stats_.peer_reused += std::uint64_t(std::max<std::int64_t>(0, peer.reused));
        stats_.peer_builds += std::uint64_t(std::max<std::int64_t>(0, peer.built));
        stats_.peer_rebinds += std::uint64_t(std::max<std::int64_t>(0, peer.rebound));
        prepared.emplace(mine, peer);
        if (!(mine == peer)) {
            (mine.reused > peer.reused ? stats_.reuse_more : mine.reused < peer.reused ? stats_.reuse_fewer
                                                                                       : stats_.prepared_otherwise)++;
            if (reuse_diffs_.size() < kMaxReuseDiffs) {
                std::string before_ops;
                for (const auto& [i, kind] : recent_ops_)
                    before_ops += cat(before_ops.empty() ? "" : ", ", "op ", i, " ", to_string(kind));
                reuse_diffs_.push_back({op_index_, std::string(to_string(op_kind_)), batch_shape(std::vector<int>(seqs.begin(), seqs.end())), mine, peer,
                                        before_ops});
            }
        }
    }
    const auto v = std::size_t(config_.model.vocab);
    const double tolerance = config_.engine.peer->tolerance;
    std::size_t row = 0;  // the rows are the output pairs'
    for (const Pair& pair : pairs) {
        if (!pair.output) continue;
        const std::size_t i = row++;
        ++stats_.peer_rows;
        const auto slice = [&](const std::vector<float>& rows) { return std::span<const float>(rows).subspan(i * v, v); };
        const double err = logit_error(slice(got), slice(theirs));
        stats_.max_peer_error = std::max(stats_.max_peer_error, std::isfinite(err) ? err : 1e300);
        if (!(err <= tolerance))
            fail(Verdict::rows_differ, Oracle::peer,
                 cat("sequence ", pair.seq, " position ", pair.pos, " (row ", i, " of ", got.size() / v,
                     " in the call): logit error ", err, " between the engine's row and the peer's, past the tolerance ",
                     tolerance,
                     prepared ? cat("; this call the engine ", describe(prepared->first), ", the peer ",
                                    describe(prepared->second))
                              : ""));
    }
}

std::vector<float> Simulator::decode_or_both_refuse(std::span<const std::int32_t> seqs,
                                                   std::span<const std::int32_t> tokens,
                                                   std::span<const std::uint8_t> outputs) {
    try {
        return engine_->decode(seqs, tokens, outputs);
    } catch (const Error& mine) {
        try {
            second_->decode(seqs, tokens, outputs);
        } catch (const Error& theirs) {
            ended_early_ = cat("both engines refused the decode at op ", op_index_, " (", to_string(op_kind_), "): engine A (",
                               config_.engine.engine, "): ", mine.what(), "; engine B (", config_.engine.peer->engine,
                               "): ", theirs.what());
            throw Stop{};
        }
        throw;  // engine A's refusal alone: a difference
    }
}

void Simulator::end() {
    if (verdict_ != Verdict::pass || reuse_diffs_.empty()) return;
    const ReuseDiff& d = reuse_diffs_.front();
    verdict_ = Verdict::reuse_differs;
    failure_ = Failure{d.op_index, d.op, Oracle::peer,
                       cat(stats_.reuse_diffs(), " calls prepared their plans differently (", stats_.reuse_more,
                           " where the engine reused more, ", stats_.reuse_fewer, " fewer, ", stats_.prepared_otherwise,
                           " as many but built or rebound otherwise); the first, a ", d.shape, " batch after ",
                           d.before.empty() ? "nothing" : d.before, ": the engine ", describe(d.engine), ", the peer ",
                           describe(d.peer))};
}

}  // namespace kvweld::sim
