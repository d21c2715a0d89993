// Each observer proves its own power: a fault only it can see at that step
// is named by it, at that step, and not by a later oracle; the peer
// compares each per-call count on its own; the kill matrix attributes each
// fault to the oracle that caught it first.
#include "engine/faults.hpp"
#include "sim/observers.hpp"
#include "sim/run.hpp"
#include "sim/simulator.hpp"
#include "targets/kvweld/kvweld_entries.hpp"
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

}  // namespace
}  // namespace kvweld::sim

namespace kvweld::sim {
namespace {

// One observer alone over a real engine: the simulator's account (the
// World) built by hand, so a test makes the calls and publishes what it likes.
struct Bench {
    explicit Bench(const std::string& name, const std::string& params = "")
        : config(draw_config(2, EngineChoice{name, params, ""}, "tiny", targets::engine_capabilities(name))),
          model(Model::random(config.model, config.weights_seed)),
          requests(std::size_t(config.seqs)),
          engine(targets::open_engine(name, "", config.setup(), model)),
          world{config, model, adapters, requests, generation, generation, *engine, samplers} {}
    // Decodes `tokens` for `seq` from position `pos` on and hands `observer` the rows.
    std::vector<std::vector<float>> decode(Observer& observer, int seq, int pos, std::vector<int> tokens,
                                           std::optional<float> nudge = std::nullopt) {
        std::vector<Pair> pairs;
        for (int t : tokens) pairs.push_back({seq, t, pos++});
        const Batch batch(pairs);
        observer.before_decode(batch);
        std::vector<float> got = engine->decode(batch.seqs, batch.tokens, batch.outputs);
        if (nudge) got.back() += *nudge;
        Decoded d{batch, got, {}, {}, {}};
        observer.on_decode(d);
        return d.want;
    }
    targets::EngineSetup engine_setup() const { return config.setup(); }
    SimConfig config;
    Model model;
    Adapters adapters;
    std::vector<std::optional<Request>> requests;
    std::uint64_t generation = 1;
    std::unique_ptr<targets::Engine> engine;
    std::map<int, SamplerSpec> samplers;
    World world;
    Judge judge;
    RunStats stats;
};

// The data shadow follows the calls it is told (a copy copies the
// reference's KV) and judges every row: the engine's rows pass, one
// logit moved by 0.01 does not.
TEST(DataShadow, FollowsACopyAndJudgesEveryRow) {
    Bench b("inproc", "policy=rebind");
    b.config.seqs = 2;
    b.requests.resize(2);
    DataShadow shadow(b.world, b.judge, b.stats, true);
    b.engine->apply(calls::Open{0});
    shadow.on_call(targets::calls::Open{0});
    b.decode(shadow, 0, 0, {1, 2, 3});
    EXPECT_EQ(b.stats.reference_rows, 3u);
    b.engine->apply(calls::Open{1});
    b.engine->apply(calls::Copy{0, 1});
    shadow.on_call(targets::calls::Copy{0, 1, true});
    EXPECT_EQ(shadow.shadow(1).key, shadow.shadow(0).key);
    b.decode(shadow, 1, 3, {4});  // the copy's next row is judged against the copied shadow
    EXPECT_EQ(b.judge.verdict(), Verdict::pass);
    EXPECT_THROW(b.decode(shadow, 0, 3, {5}, 0.01f), Judge::Stop);
    EXPECT_EQ(b.judge.verdict(), Verdict::stale_decode);
    EXPECT_EQ(b.judge.failure()->oracle, Oracle::data);
}

// The ledger takes the engine's storage report only as kvweld's rule says
// the call may change it: a clear the engine made replaces the storage and
// passes; one it never made leaves the serials kept where they must be new;
// and storage that changes in a call that keeps it is named too.
TEST(StorageLedger, TakesAStorageReportOnlyAsTheRuleAllows) {
    // A sequence opened and accepted; then the engine clears it or not, and
    // the ledger is told `call`. Returns the failure's detail ("" passes).
    const auto told = [](bool cleared, const targets::MemoryCall& call) -> std::string {
        Bench b("inproc", "policy=rebind");
        const auto rule = targets::kvweld_reuse_rule(b.config.setup());
        std::set<std::uint64_t> seen;
        StorageLedger ledger(b.world, b.judge, rule.get(), nullptr, seen, true);
        b.engine->apply(calls::Open{0});
        b.requests[0].emplace();
        ledger.on_call(targets::calls::Open{0});
        if (cleared) b.engine->apply(calls::Clear{0});
        try {
            ledger.on_call(call);
        } catch (const Judge::Stop&) {
            EXPECT_EQ(b.judge.failure()->oracle, Oracle::ledger);
            return b.judge.failure()->detail;
        }
        return "";
    };
    EXPECT_EQ(told(true, targets::calls::Clear{0}), "");
    EXPECT_NE(told(false, targets::calls::Clear{0}).find("in an op that replaces it"), std::string::npos);
    EXPECT_EQ(told(false, targets::calls::Truncate{0, 0}), "");
    EXPECT_NE(told(true, targets::calls::Truncate{0, 0}).find("in an op that keeps it"), std::string::npos);
}

// The block ledger follows the pool from the calls alone: a grow the engine
// made passes; a grow it never made (the model replaced the storage, the
// engine did not) is named.
TEST(BlockLedger, AGrowTheEngineNeverMadeIsNamed) {
    for (const bool grow_made : {true, false}) {
        Bench b("kvweld-paged", "block=4,blocks=8");
        std::set<std::uint64_t> seen;
        BlockLedger blocks(b.world, b.judge, targets::BlockModel::for_kvweld_paged(b.engine_setup()), seen, true);
        b.engine->apply(calls::Open{0});
        b.requests[0].emplace();
        b.decode(blocks, 0, 0, {1, 2, 3, 4, 5});
        ASSERT_EQ(b.judge.verdict(), Verdict::pass);
        if (grow_made) b.engine->apply(calls::PoolOp{KVWELD_POOL_GROW});
        blocks.on_call(targets::calls::PoolOp{KVWELD_POOL_GROW});
        if (grow_made) {
            blocks.after_op(OpKind::grow);
            EXPECT_EQ(b.judge.verdict(), Verdict::pass);
            continue;
        }
        EXPECT_THROW(blocks.after_op(OpKind::grow), Judge::Stop);
        EXPECT_EQ(b.judge.failure()->oracle, Oracle::blocks) << b.judge.failure()->detail;
    }
}

}  // namespace
}  // namespace kvweld::sim
