// kvweld diff (sim/diff.hpp, the peer oracle): an engine against itself
// differs in nothing, call for call and row for row; against itself with a
// fault switch on, the diff finds the fault: a stale plan as rows that
// differ, a plan rebuilt every call as calls prepared differently with every
// row the same; and the trace of a difference replays to the same verdict.
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "sim/diff.hpp"

#include <gtest/gtest.h>

namespace kvweld::sim {
namespace {

DiffOptions self_diff(const std::string& engine, const std::string& peer_faults, std::uint64_t seeds) {
    DiffOptions o;
    o.swarm.first = 0;
    o.swarm.last = seeds - 1;
    o.swarm.jobs = 2;
    o.swarm.steps = 150;
    o.swarm.engine = EngineChoice{engine, "", ""};
    o.swarm.engine.peer = PeerChoice{engine, "", peer_faults};
    o.shrink_runs = 0;
    return o;
}

TEST(Diff, AnEngineAgainstItselfDiffersInNothing) {
    for (const char* engine : {"inproc", "kvweld"}) {
        const DiffResult r = run_diff(self_diff(engine, "", 20));
        EXPECT_TRUE(r.same()) << engine << "\n" << diff_table(r, self_diff(engine, "", 20));
        const RunStats& t = r.swarm.total;
        EXPECT_GT(t.peer_rows, 1000u) << engine;  // it compared, and much
        EXPECT_EQ(t.max_peer_error, 0.0) << engine;
        EXPECT_GT(t.reused, 1000u) << engine;  // reuse was there to compare
        EXPECT_EQ(t.reused, t.peer_reused) << engine;
        EXPECT_EQ(t.builds, t.peer_builds) << engine;
        EXPECT_EQ(t.reuse_diffs(), 0u) << engine;
        // Per class of batch shape too: classes of both kinds ran, each
        // reused alike, so none is named as reused by one engine only.
        EXPECT_GT(t.peer_shapes.size(), 3u) << engine;
        for (const auto& [shape, p] : t.peer_shapes) EXPECT_EQ(p.reused, p.peer_reused) << engine << " " << shape;
        EXPECT_EQ(diff_table(r, self_diff(engine, "", 20)).find("never does"), std::string::npos) << engine;
        EXPECT_TRUE(r.swarm.oracles.peer);
        EXPECT_FALSE(r.swarm.oracles.data);  // the peer is the only oracle
    }
}

TEST(Diff, AStalePlanInThePeerIsRowsThatDiffer) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const DiffResult r = run_diff(self_diff("inproc", "offset_not_rebound", 20));
    EXPECT_GT(r.rows_differ, 10u);
    for (const RunResult& s : r.swarm.seeds)
        if (s.verdict != Verdict::pass) {
            EXPECT_EQ(s.verdict, Verdict::rows_differ);
            ASSERT_TRUE(s.failure.has_value());
            EXPECT_EQ(s.failure->oracle, Oracle::peer);
        }
}

TEST(Diff, APeerThatRebuildsEveryCallPreparesDifferentlyWithEveryRowTheSame) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const DiffResult r = run_diff(self_diff("inproc", "always_stale", 10));
    EXPECT_EQ(r.rows_differ, 0u);  // rebuilding is slow, not wrong
    EXPECT_GT(r.reuse_differs, 5u);
    const RunStats& t = r.swarm.total;
    EXPECT_GT(t.reuse_more, 0u);   // the engine reused where the peer built
    EXPECT_EQ(t.reuse_fewer, 0u);  // never the other way round
    EXPECT_GT(t.peer_builds, t.builds);
    for (const RunResult& s : r.swarm.seeds)
        if (s.verdict == Verdict::reuse_differs) {
            ASSERT_FALSE(s.reuse_diffs.empty());
            EXPECT_GT(s.reuse_diffs.front().engine.reused, s.reuse_diffs.front().peer.reused);
            EXPECT_FALSE(s.reuse_diffs.front().shape.empty());
        }
}

TEST(Diff, ATraceOfADifferenceReplaysToTheSameVerdictAndShrinks) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    DiffOptions o = self_diff("inproc", "always_stale", 1);
    const SimConfig config = draw_config(0, o.swarm.engine, "", choice_capabilities(o.swarm.engine));
    const RunResult run = run_generated(config, 150);
    ASSERT_EQ(run.verdict, Verdict::reuse_differs);
    const Trace t = parse_trace(trace_text(run));
    ASSERT_TRUE(t.config.engine.peer.has_value());
    EXPECT_EQ(t.config.engine.peer->faults, "always_stale");
    const RunResult again = run_ops(t.config, t.ops, t.steps);
    EXPECT_EQ(again.verdict, Verdict::reuse_differs);
    EXPECT_EQ(text_report(again), text_report(run));
    const ShrunkTrace s = shrink_seed(config, 150, 200, "");
    EXPECT_EQ(s.verdict, Verdict::reuse_differs);
    EXPECT_LT(s.ops_after, s.ops_before);
    EXPECT_NE(reproduce_command(config, 150).find("kvweld diff --engine inproc --engine inproc"), std::string::npos);
}

TEST(Diff, APeerOfAnotherVocabOrAnUnknownEngineIsRefused) {
    DiffOptions o = self_diff("inproc", "", 1);
    o.swarm.engine.peer->engine = "no-such-engine";
    EXPECT_THROW(run_diff(o), Error);
    o.swarm.engine.peer.reset();
    EXPECT_THROW(run_diff(o), Error);
}

}  // namespace
}  // namespace kvweld::sim
