// The peer oracle, kvweld diff's: a second engine (another release,
// another setting, another plugin, or the same engine with a fault switch)
// opened on the same model and driven in lockstep (lockstep.cpp), the same
// tokens fed to both. Per call it compares what each engine's counters
// say it prepared, each count on its own (reused, built, rebound), and
// records every call where they differ, with the batch and the ops before
// it; per row, the two engines' logits (logit_error past the tolerance
// ends the run). It needs no reuse rule and no reference, so it works for
// any pair of engines; it says which calls and rows differ, not which
// engine is wrong.
#include "sim/observers.hpp"

#include "engine/reference.hpp"
#include "targets/registry.hpp"
#include "util/cat.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim {

using namespace targets;

namespace {

Prepared prepared_between(const kvweld_engine_counters& a, const kvweld_engine_counters& b) {
    const auto delta = [](std::uint64_t after, std::uint64_t before) { return std::int64_t(after) - std::int64_t(before); };
    return {delta(b.reused, a.reused), delta(b.builds, a.builds), delta(b.rebound, a.rebound)};
}

std::string describe(const Prepared& p) { return cat("reused ", p.reused, ", built ", p.built, ", rebound ", p.rebound); }

}  // namespace

std::optional<PreparedDiff> compare_prepared(const Prepared& engine, const Prepared& peer) {
    if (engine.reused != peer.reused) return engine.reused > peer.reused ? PreparedDiff::reused_more : PreparedDiff::reused_fewer;
    if (engine.built != peer.built || engine.rebound != peer.rebound) return PreparedDiff::otherwise;
    return std::nullopt;
}

// The peer is the run's oracle: nothing else judges, so a difference in
// design between the two (another release's ubatch split) is reported as a
// difference, never checked against one engine's rule.
std::unique_ptr<Lockstep> open_peer(const World& world, Judge& judge, RunStats& stats, OracleReport& oracles) {
    const PeerChoice& p = *world.config.engine.peer;
    EngineSetup setup = world.config.setup();
    setup.params = p.params;
    auto second = open_engine(p.engine, p.faults, setup, world.model);
    oracles.all_off("kvweld diff: the peer engine is the oracle");
    oracles.peer = true;
    const bool engine_counts = world.engine.capabilities() & KVWELD_CAP_PLAN_COUNTERS;
    const bool peer_counts = second->capabilities() & KVWELD_CAP_PLAN_COUNTERS;
    if (!engine_counts || !peer_counts)
        oracles.peer_reuse_why_not = cat(engine_counts ? second->name() : world.engine.name(), " declares no plan counters");
    return std::make_unique<Lockstep>(world, judge, stats, std::move(second), Lockstep::Role::peer, p.tolerance,
                                      engine_counts && peer_counts);
}

void Lockstep::compare_peer(const Decoded& d, const std::vector<float>& theirs) {
    const std::vector<float>& got = d.got;
    // The call's plans first: a row difference ends the run, and its message says how each prepared.
    std::optional<std::pair<Prepared, Prepared>> prepared;
    if (peer_counts_ && engine_before_ && second_before_) {
        const auto engine_after = world_.engine.counters();
        const auto peer_after = on_second([&] { return second_->counters(); });
        require(engine_after && peer_after, "an engine stopped reporting its counters");
        const Prepared mine = prepared_between(*engine_before_, *engine_after),
                       peer = prepared_between(*second_before_, *peer_after);
        stats_.peer_reused += std::uint64_t(std::max<std::int64_t>(0, peer.reused));
        stats_.peer_builds += std::uint64_t(std::max<std::int64_t>(0, peer.built));
        stats_.peer_rebinds += std::uint64_t(std::max<std::int64_t>(0, peer.rebound));
        prepared.emplace(mine, peer);
        const std::string shape = batch_shape(std::vector<int>(d.batch.seqs.begin(), d.batch.seqs.end()));
        RunStats::ShapePair& by_shape = stats_.peer_shapes[shape];
        ++by_shape.calls;
        by_shape.reused += std::uint64_t(std::max<std::int64_t>(0, mine.reused));
        by_shape.peer_reused += std::uint64_t(std::max<std::int64_t>(0, peer.reused));
        if (const auto diff = compare_prepared(mine, peer)) {
            (*diff == PreparedDiff::reused_more    ? stats_.reuse_more
             : *diff == PreparedDiff::reused_fewer ? stats_.reuse_fewer
                                                   : stats_.prepared_otherwise)++;
            if (reuse_diffs_.size() < kMaxReuseDiffs) {
                std::string before_ops;
                for (const auto& [i, kind] : recent_ops_)
                    before_ops += cat(before_ops.empty() ? "" : ", ", "op ", i, " ", to_string(kind));
                reuse_diffs_.push_back(
                    {judge_.op_index(), std::string(to_string(judge_.op_kind())), shape, mine, peer, before_ops});
            }
        }
    }
    const auto v = std::size_t(world_.config.model.vocab);
    std::size_t row = 0;  // the rows are the output pairs'
    for (const Pair& pair : d.batch.pairs) {
        if (!pair.output) continue;
        const std::size_t i = row++;
        if (chained(pair)) continue;
        ++stats_.peer_rows;
        const auto slice = [&](const std::vector<float>& rows) { return std::span<const float>(rows).subspan(i * v, v); };
        const double err = logit_error(slice(got), slice(theirs));
        stats_.max_peer_error = std::max(stats_.max_peer_error, std::isfinite(err) ? err : 1e300);
        if (!(err <= peer_tolerance_))
            judge_.fail(Verdict::rows_differ, Oracle::peer,
                        cat("sequence ", pair.seq, " position ", pair.pos, " (row ", i, " of ", got.size() / v,
                            " in the call): logit error ", err,
                            " between the engine's row and the peer's, past the tolerance ", peer_tolerance_,
                            prepared ? cat("; this call the engine ", describe(prepared->first), ", the peer ",
                                           describe(prepared->second))
                                     : ""));
    }
}

// The run is over: a diff whose rows agreed but whose plans did not ends
// with reuse_differs, at the first such call.
void Lockstep::at_end() {
    if (role_ != Role::peer || judge_.verdict() != Verdict::pass || reuse_diffs_.empty()) return;
    const ReuseDiff& d = reuse_diffs_.front();
    judge_.set_failure(Verdict::reuse_differs,
                       Failure{d.op_index, d.op, Oracle::peer,
                               cat(stats_.reuse_diffs(), " calls prepared their plans differently (", stats_.reuse_more,
                                   " where the engine reused more, ", stats_.reuse_fewer, " fewer, ",
                                   stats_.prepared_otherwise, " as many but built or rebound otherwise); the first, a ",
                                   d.shape, " batch after ", d.before.empty() ? "nothing" : d.before, ": the engine ",
                                   describe(d.engine), ", the peer ", describe(d.peer))});
}

}  // namespace kvweld::sim
