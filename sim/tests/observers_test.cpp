// Each observer proves its own power: a fault only it can see at that step
// is named by it, at that step, and not by a later oracle; the peer
// compares each per-call count on its own; the kill matrix attributes each
// fault to the oracle that caught it first.
#include "engine/faults.hpp"
#include "sim/mutants.hpp"
#include "sim/observers.hpp"
#include "sim/run.hpp"
#include "sim/simulator.hpp"
#include "targets/registry.hpp"

#include <gtest/gtest.h>

namespace kvweld::sim {
namespace {

// Right after the engine decoded a call (and before the kv oracle reads
// it), one layer of the last pair's held K row is made wrong: the logits
// the engine returned are right, only the storage is not.
class CorruptHeldRow final : public Observer {
public:
    CorruptHeldRow(const World& world, int layer) : world_(world), layer_(layer) {}
    bool armed = false;
    void on_decode(Decoded& d) override {
        if (!armed) return;
        const Pair& p = d.batch.pairs.back();
        const KvLayer storage = world_.engine.white_box()->held_layers(p.seq)[std::size_t(layer_)];
        storage->key_row(p.pos)[0] += 1.0f;
        if (storage->device()) storage->device()->upload(*storage, p.pos, 1);
    }

private:
    const World& world_;
    int layer_;
};

SimConfig one_sequence() {
    SimConfig c = draw_config(1, EngineChoice{"inproc", "policy=rebind", ""}, "tiny",
                              targets::engine_capabilities("inproc"));
    c.seqs = 1;
    c.n_ctx = 64;
    c.capacities = {64};
    return c;
}

// The first and the deepest layer: a kv oracle that skipped one would leave
// the row to the data oracle, which sees it only steps later.
TEST(KvOracle, NamesOneWrongHeldLayerAtThatStepWhileTheLogitsAreRight) {
    const SimConfig c = one_sequence();
    const std::vector<Op> ops = {Op{ops::Admit{.prompt = {1, 2, 3}, .max_new = 8}}, Op{ops::Step{.wants = {3}}},
                                 Op{ops::Step{.wants = {1}}}, Op{ops::Step{.wants = {1}}}};
    for (const int layer : {0, c.model.n_layers - 1}) {
        for (const bool corrupt : {false, true}) {
            Simulator sim(c);
            auto observer = std::make_unique<CorruptHeldRow>(sim.world(), layer);
            CorruptHeldRow& corrupter = *observer;
            sim.insert_observer<KvOracle>(std::move(observer));
            bool ran = true;
            for (std::size_t i = 0; i < ops.size() && ran; ++i) {
                corrupter.armed = corrupt && i == 2;
                ran = sim.apply(ops[i], i);
            }
            if (!corrupt) {
                EXPECT_EQ(sim.verdict(), Verdict::pass) << "layer " << layer;
                continue;
            }
            ASSERT_EQ(sim.verdict(), Verdict::stale_decode) << "layer " << layer;
            EXPECT_EQ(sim.failure()->oracle, Oracle::kv) << sim.failure()->detail;
            EXPECT_EQ(sim.failure()->op_index, 2u) << sim.failure()->detail;
            EXPECT_NE(sim.failure()->detail.find(cat("layer ", layer, ":")), std::string::npos) << sim.failure()->detail;
        }
    }
}

// Two engines that reuse equally often but prepare otherwise (one rebinds
// where the other builds) differ: every count is compared on its own.
TEST(Peer, ComparesEachPerCallCountOnItsOwn) {
    const Prepared same{5, 1, 0};
    EXPECT_FALSE(compare_prepared(same, same));
    EXPECT_EQ(compare_prepared({6, 0, 0}, {5, 1, 0}), PreparedDiff::reused_more);
    EXPECT_EQ(compare_prepared({4, 2, 0}, {5, 1, 0}), PreparedDiff::reused_fewer);
    EXPECT_EQ(compare_prepared({5, 2, 0}, {5, 1, 0}), PreparedDiff::otherwise);  // built alone
    EXPECT_EQ(compare_prepared({5, 1, 1}, {5, 1, 0}), PreparedDiff::otherwise);  // rebound alone
    EXPECT_EQ(compare_prepared({5, 0, 1}, {5, 1, 0}), PreparedDiff::otherwise);  // a rebind where the other built
}

// The same in a run: rebind against rebuild reuse as often, and the diff
// ends reuse_differs with every such call counted as prepared otherwise.
TEST(Peer, TellsRebindFromRebuildWhereReuseIsEqual) {
    SimConfig c = one_sequence();
    c.seqs = 2;
    c.engine.peer = PeerChoice{"inproc", "policy=rebuild", ""};
    const std::vector<Op> ops = {Op{ops::Admit{.prompt = {1, 2, 3}, .max_new = 8}}, Op{ops::Step{.wants = {3, 0}}},
                                 Op{ops::Preempt{}},                               Op{ops::Step{.wants = {3, 0}}},
                                 Op{ops::Step{.wants = {1, 0}}}};
    const RunResult r = run_ops(c, ops, int(ops.size()));
    ASSERT_EQ(r.verdict, Verdict::reuse_differs) << (r.failure ? r.failure->detail : "");
    EXPECT_EQ(r.stats.reuse_more + r.stats.reuse_fewer, 0u);
    EXPECT_GT(r.stats.prepared_otherwise, 0u);
}

// The kill matrix says which oracle caught each fault first; these are
// pinned: a plan on the wrong offset shows in the rows, a partial rebind in
// the weld, a plan that always rebuilds and a lying counter in the accounting.
TEST(KillMatrix, AttributesEachFaultToTheOracleThatCaughtItFirst) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    MutantsOptions o;
    o.seeds = 6;
    o.steps = 120;
    o.jobs = 2;
    o.engine = EngineChoice{"inproc", "", ""};
    o.faults = {"offset_not_rebound", "partial_rebind", "always_stale", "build_counted_as_kept"};
    const MutantsResult r = run_mutants(o);
    const std::pair<const char*, Oracle> first_by[] = {{"offset_not_rebound", Oracle::data},
                                                       {"partial_rebind", Oracle::weld},
                                                       {"always_stale", Oracle::accounting},
                                                       {"build_counted_as_kept", Oracle::accounting}};
    ASSERT_EQ(r.rows.size(), std::size(first_by));
    for (std::size_t i = 0; i < r.rows.size(); ++i) {
        const MutantRow& row = r.rows[i];
        EXPECT_EQ(row.fault, first_by[i].first);
        ASSERT_TRUE(row.caught()) << row.fault;
        EXPECT_EQ(row.failure->oracle, first_by[i].second) << row.fault << ": " << caught_by(row);
        EXPECT_GT(row.by_oracle[std::size_t(first_by[i].second)], 0u) << row.fault << ": " << caught_by(row);
        EXPECT_NE(caught_by(row).find(std::string(to_string(first_by[i].second))), std::string::npos);
    }
}

}  // namespace
}  // namespace kvweld::sim
