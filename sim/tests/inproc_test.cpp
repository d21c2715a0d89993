// The simulator over kvweld's engine in process (the default, with the
// white-box oracles): one seed decides everything (byte-identical traces and
// reports, swarms independent of --jobs), replay reproduces a report byte
// for byte, shrink keeps the failure class, and a swarm of the correct
// engine passes while really exercising the contract.
#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "targets/registry.hpp"
#include "sim/json_report.hpp"
#include "sim/run.hpp"
#include "sim/tests/default_config.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <set>

namespace kvweld::sim {
namespace {

using testing::default_config;

RunResult replay(const RunResult& original) {
    const Trace t = parse_trace(trace_text(original));
    return run_ops(t.config, t.ops, t.steps);
}

TEST(Determinism, SameSeedSameTraceAndReport) {
    for (std::uint64_t seed : {1ull, 17ull, 123456789ull}) {
        const RunResult a = run_generated(default_config(seed), 200);
        const RunResult b = run_generated(default_config(seed), 200);
        EXPECT_EQ(trace_text(a), trace_text(b)) << seed;
        EXPECT_EQ(text_report(a), text_report(b)) << seed;
        EXPECT_EQ(json_report(a).dump(), json_report(b).dump()) << seed;
        EXPECT_GT(a.stats.rows, 0u);
    }
    EXPECT_NE(trace_text(run_generated(default_config(1), 100)), trace_text(run_generated(default_config(2), 100)));
}

std::string per_seed(const SwarmResult& r) {
    std::string out;
    for (const RunResult& s : r.seeds) out += json_report(s).dump() + "\n";
    return out;
}

TEST(Determinism, SwarmResultsDoNotDependOnJobs) {
    SwarmOptions o;
    o.first = 100;
    o.last = 129;
    o.steps = 120;
    o.jobs = 1;
    const SwarmResult one = run_swarm(o);
    o.jobs = 2;
    const SwarmResult two = run_swarm(o);
    EXPECT_EQ(per_seed(one), per_seed(two));
    EXPECT_EQ(swarm_table(one, o), swarm_table(two, o));
}

// The kill matrix's --until-killed: a swarm that stops at its first new
// failure holds exactly the full swarm's seeds up to that one, whatever
// the jobs; a swarm without a failure runs every seed.
TEST(Determinism, AStoppedSwarmEndsAtItsFirstFailureWhateverTheJobs) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    SwarmOptions o;
    o.first = 0;
    o.last = 7;
    o.steps = 120;
    o.engine.faults = "no_remint_on_clear";
    const SwarmResult full = run_swarm(o);
    std::size_t first = 0;
    while (first < full.seeds.size() && full.seeds[first].verdict == Verdict::pass) ++first;
    ASSERT_LT(first + 1, full.seeds.size()) << "no failure before the last seed: nothing to stop";
    // Verdict, op and oracle per seed (a failure's detail names storage
    // serials, which count on across runs in one process).
    const auto outcomes = [](const SwarmResult& r, std::size_t n) {
        std::string out;
        for (std::size_t i = 0; i < n; ++i)
            out += cat(r.seeds[i].config.seed, " ", to_string(r.seeds[i].verdict), " ",
                       r.seeds[i].failure ? cat(r.seeds[i].failure->op_index, " ", to_string(r.seeds[i].failure->oracle))
                                          : "", "\n");
        return out;
    };
    o.stop_at_new_failure = true;
    for (int jobs : {1, 3}) {
        o.jobs = jobs;
        const SwarmResult stopped = run_swarm(o);
        ASSERT_EQ(stopped.seeds.size(), first + 1) << jobs;
        EXPECT_EQ(outcomes(stopped, first + 1), outcomes(full, first + 1)) << jobs;
    }
    o.engine.faults = "";
    EXPECT_EQ(run_swarm(o).seeds.size(), full.seeds.size());
}

TEST(Determinism, NamingTheDrawnModelGivesTheSameConfig) {
    const SimConfig drawn = default_config(5);
    EXPECT_EQ(nlohmann::json(drawn).dump(), nlohmann::json(default_config(5, "", drawn.model_name)).dump());
}

TEST(Replay, ReproducesAPassingReportByteForByte) {
    const RunResult original = run_generated(default_config(31), 250);
    ASSERT_EQ(original.verdict, Verdict::pass);
    const RunResult again = replay(original);
    EXPECT_EQ(text_report(again), text_report(original));
    EXPECT_EQ(json_report(again).dump(), json_report(original).dump());
}

// First seed in [0, 200) whose run fails under the fault.
RunResult first_failure(const std::string& fault, int steps) {
    for (std::uint64_t seed = 0; seed < 200; ++seed) {
        RunResult r = run_generated(default_config(seed, fault), steps);
        if (r.verdict != Verdict::pass) return r;
    }
    ADD_FAILURE() << "no seed fails under " << fault;
    return {};
}

TEST(Replay, ReproducesAFailingReportByteForByte) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const RunResult original = first_failure("spec_reject_off_by_one", 300);
    ASSERT_EQ(original.verdict, Verdict::stale_decode);
    EXPECT_EQ(text_report(replay(original)), text_report(original));
}

// Faults of the white box alone: a plan rebound onto a slot's new storage
// (no_remint_on_clear: caught by the weld), the scheduler's own
// (spec_reject_off_by_one), and a model left out of the key.
TEST(Shrink, YieldsAShorterTraceThatFailsTheSameWay) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    for (const char* f : {"no_remint_on_clear", "spec_reject_off_by_one", "model_id_not_in_key"}) {
        const RunResult original = first_failure(f, 300);
        ASSERT_NE(original.verdict, Verdict::pass);
        const ShrinkResult s = shrink(original.config, original.ops, original.steps, original.verdict);
        EXPECT_LT(s.ops.size(), original.ops.size()) << f;
        EXPECT_LE(s.ops.size(), 8u) << f;  // these faults need only a handful of ops
        EXPECT_EQ(s.result.verdict, original.verdict) << f;
        EXPECT_EQ(replay(s.result).verdict, original.verdict) << f;  // the written trace fails the same way
        std::printf("%s: %zu ops -> %zu ops (%d runs)\n", f, original.ops.size(), s.ops.size(), s.runs);
    }
}

TEST(Shrink, RefusesAPassingTrace) {
    const RunResult ok = run_generated(default_config(3), 50);
    EXPECT_THROW(shrink(ok.config, ok.ops, ok.steps, Verdict::stale_decode), Error);
}

// The white box's capacities, both halves: a slot whose next request gets
// storage of the same capacity rebinds its held plan; one whose request
// gets another capacity must build (the capacity sizes the plan's buffers).
TEST(WhiteBox, ASameCapacityRebindsAndAnotherCapacityBuilds) {
    SimConfig c = default_config(4, "", "tiny");
    c.seqs = 1;
    c.n_ctx = 64;
    c.capacities = {64, 32};
    c.engine.params = "policy=rebind";
    const Op admit{ops::Admit{.prompt = {1, 2, 3}, .max_new = 2}};
    const Op admit_small{ops::Admit{.prompt = {1, 2, 3}, .max_new = 2, .capacity = 1}};  // capacity 32
    const Op step{ops::Step{.wants = {8}}};
    const Op retire{ops::Retire{}};
    const std::vector<Op> ops = {admit, step, retire, admit, step, retire, admit_small, step};
    const RunResult r = run_ops(c, ops, int(ops.size()));
    ASSERT_EQ(r.verdict, Verdict::pass) << text_report(r);
    EXPECT_EQ(r.stats.builds, 2u) << text_report(r);   // the first decode, and the one on capacity 32
    EXPECT_EQ(r.stats.rebinds, 1u) << text_report(r);  // the second request, same capacity
    EXPECT_EQ(r.stats.reused, r.stats.plans - 3) << text_report(r);
}

// The adapter rows of the contract through the simulator, both halves: a
// new LoRA set builds once per slot; new scales and a control vector set or
// cleared keep the plan; each fault that breaks a half is caught by its class.
TEST(WhiteBox, ANewAdapterSetBuildsAndScalesAndControlVectorsKeepThePlan) {
    SimConfig c = default_config(4, "", "tiny");
    c.seqs = 1;
    c.n_ctx = 64;
    c.capacities = {64};
    c.engine.params = "policy=rebind";
    const Op admit{ops::Admit{.prompt = {1, 2, 3}, .max_new = 40}};
    const Op step{ops::Step{.wants = {1}}};
    auto lora = [](std::vector<int> adapters, std::vector<float> scales) {
        return Op{ops::Lora{std::move(adapters), std::move(scales)}};
    };
    const Op cvec{ops::Cvec{.seed = 2, .start = 1, .end = 1}};
    const Op cvec_clear{ops::Cvec{.clear = true}};
    const Op prefill{ops::Step{.wants = {3}}};
    const std::vector<Op> ops = {admit,      prefill, lora({0, 2}, {1.0f, 0.5f}), step,
                                 lora({0, 2}, {2.0f, 0.0f}),  // scales only
                                 step,       cvec,    step,   cvec_clear, step,
                                 lora({}, {}), step};
    const RunResult r = run_ops(c, ops, int(ops.size()));
    ASSERT_EQ(r.verdict, Verdict::pass) << text_report(r);
    EXPECT_EQ(r.stats.builds, 3u) << text_report(r);  // the first decode, and after each of the two new sets
    EXPECT_EQ(r.stats.reused, r.stats.plans - 3) << text_report(r);
    EXPECT_EQ(r.stats.ops_by_kind[std::size_t(OpKind::lora)], 3u);
    EXPECT_EQ(r.stats.ops_by_kind[std::size_t(OpKind::cvec)], 2u);
    if (!kFaultsCompiled) GTEST_SKIP() << "the fault half needs a KVWELD_FAULTS build";
    const std::pair<const char*, Verdict> faults[] = {
        {"adapter_set_not_in_key", Verdict::stale_decode}, {"lora_scale_baked", Verdict::stale_decode},
        {"lora_scale_in_key", Verdict::spurious_invalidation}, {"cvec_baked", Verdict::stale_decode},
        {"cvec_in_key", Verdict::spurious_invalidation},
    };
    for (const auto& [fault, verdict] : faults) {
        c.engine.faults = fault;
        EXPECT_EQ(run_ops(c, ops, int(ops.size())).verdict, verdict) << fault;
    }
}

// Output subsets on kvweld's engine, both halves: a prefill chunk that
// wants its last row only gets that row alone, checked against the
// reference; the output count is no part of the plan (it decodes a token
// per run), so every decode after the first keeps it.
TEST(WhiteBox, AnOutputSubsetReturnsThoseRowsAndKeepsThePlan) {
    SimConfig c = default_config(4, "", "tiny");
    c.seqs = 1;
    c.capacities = {c.n_ctx};
    c.engine.params = "policy=rebind";
    const Op admit{ops::Admit{.prompt = {1, 2, 3, 4, 5, 6}, .max_new = 4}};
    const Op chunk{ops::Step{.wants = {3}, .last_only = true}};
    const Op step{ops::Step{.wants = {1}}};
    const std::vector<Op> ops = {admit, chunk, chunk, step, step};
    const RunResult r = run_ops(c, ops, int(ops.size()));
    ASSERT_EQ(r.verdict, Verdict::pass) << text_report(r);
    EXPECT_EQ(r.stats.rows, 4u) << text_report(r);  // a row per chunk, a row per decode
    EXPECT_EQ(r.stats.reference_rows, 4u);
    EXPECT_EQ(r.stats.builds, 1u);
    EXPECT_EQ(r.stats.reused, r.stats.plans - 1);
    EXPECT_EQ(r.stats.plans, 8u);  // every token ran the plan, wanted or not
}

// The differential twin, both halves: the clean engine's every row equals
// its twin's (reuse off) bit for bit, and a plan that keeps a stale write
// offset after a rebind is caught by the twin, which knows nothing of the
// model, before the reference looks.
TEST(Twin, EqualRowsOnTheCleanEngineAndAStalePlanDiffers) {
    SwarmOptions o;
    o.first = 0;
    o.last = 19;
    o.steps = 200;
    o.jobs = 2;
    o.engine.twin = true;
    const SwarmResult clean = run_swarm(o);
    EXPECT_EQ(clean.failures, 0u) << swarm_table(clean, o);
    EXPECT_TRUE(clean.oracles.twin) << clean.oracles.describe();
    // Every row compared: by its logits, or (a sequence with a sampler chain) by its sampled token.
    EXPECT_GT(clean.total.sampled_compared, 0u);
    EXPECT_EQ(clean.total.twin_rows + clean.total.sampled_compared, clean.total.rows);
    if (!kFaultsCompiled) GTEST_SKIP() << "the fault half needs a KVWELD_FAULTS build";
    o.engine.faults = "offset_not_rebound";
    const SwarmResult faulty = run_swarm(o);
    // A call the abort callback stopped returns no rows: there the K/V
    // read back of what it kept is the first to see the offset. With
    // causal attention off a sequence's tokens of a call run as one span
    // through one plan, the twin's too (the kvweld rule's clause 5), which
    // writes them all at its build's offset: there the twin agrees and the
    // reference (data or kv oracle) is the first to see it.
    std::size_t by_twin = 0, in_aborted_call = 0, in_span = 0;
    for (const RunResult& r : faulty.seeds) {
        if (!r.failure || r.verdict != Verdict::stale_decode) continue;
        by_twin += r.failure->oracle == Oracle::twin;
        in_aborted_call += r.failure->oracle == Oracle::kv && r.stats.aborted_calls > 0;
        in_span += r.failure->oracle != Oracle::twin && r.stats.non_causal_spans > 0 &&
                   !(r.failure->oracle == Oracle::kv && r.stats.aborted_calls > 0);
    }
    EXPECT_EQ(by_twin + in_aborted_call + in_span, faulty.seeds.size()) << swarm_table(faulty, o);
    EXPECT_GT(by_twin, faulty.seeds.size() / 2) << swarm_table(faulty, o);
}

#if defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t kSeeds = 40;  // the sanitizer build is ~10x slower
#elif defined(KVWELD_FEWER_SEEDS)
constexpr std::uint64_t kSeeds = 60;  // CI's presets (scripts/sweep runs 300)
#else
constexpr std::uint64_t kSeeds = 300;
#endif

// Both halves: the correct engine passes every seed, and the run is not
// vacuous: plans are kept, rebound and rebuilt (the rule requires each),
// the white-box ops happen, and the blind spots are what they must be.
TEST(Swarm, CorrectEnginePassesEverySeedAndExercisesTheContract) {
    SwarmOptions o;
    o.first = 0;
    o.last = kSeeds - 1;
    o.steps = 300;
    o.jobs = 2;
    const SwarmResult r = run_swarm(o);
    EXPECT_EQ(r.failures, 0u) << swarm_table(r, o);
    const RunStats& t = r.total;
    EXPECT_EQ(t.reused, t.must_reuse);  // the rule is exact for this engine: nothing merely allowed
    EXPECT_EQ(t.may_reuse, 0u);
    EXPECT_GT(t.reused, t.plans / 2);
    EXPECT_GT(t.rebinds, 100u);
    EXPECT_GT(t.builds, 100u);
    EXPECT_GT(t.change_decodes, t.data_blind);  // some changes were visible to the data oracle
    // Every change a data-reading oracle cannot see is a same-weights reload,
    // where a plan that missed it is exactly right.
    EXPECT_EQ(t.independent_blind, t.blind_same_weights_reload);
    EXPECT_LE(t.max_kv_error, 1e-4);
    EXPECT_TRUE(r.oracles.white_box) << r.oracles.describe();
    // The adapter ops are drawn (white box), and the plans they keep are
    // required reuses above (the rule is exact).
    EXPECT_GT(t.ops_by_kind[std::size_t(OpKind::lora)], 100u);
    EXPECT_GT(t.ops_by_kind[std::size_t(OpKind::cvec)], 100u);
    std::printf("%s", swarm_table(r, o).c_str());
}

// The default swarm draws both families, GQA and MHA, several layer
// counts, sequences smaller than n_ctx as well as full ones, and both
// rebind policies.
TEST(Swarm, DrawsEveryKindOfModelCapacityAndPolicy) {
    bool llama = false, qwen3 = false, gqa = false, mha = false, small = false, full = false;
    std::set<std::string> params;
    std::set<int> layers;
    for (std::uint64_t seed = 0; seed < 100; ++seed) {
        const SimConfig c = default_config(seed);
        llama |= c.model.family == Family::llama;
        qwen3 |= c.model.family == Family::qwen3;
        gqa |= c.model.n_kv_heads < c.model.n_heads;
        mha |= c.model.n_kv_heads == c.model.n_heads;
        layers.insert(c.model.n_layers);
        params.insert(c.engine.params);
        for (int cap : c.capacities) {
            EXPECT_LE(cap, c.n_ctx);
            small |= cap < c.n_ctx;
            full |= cap == c.n_ctx;
        }
    }
    EXPECT_TRUE(llama && qwen3 && gqa && mha && small && full);
    EXPECT_GE(layers.size(), 2u);
    EXPECT_EQ(params, (std::set<std::string>{"policy=rebind", "policy=rebuild"}));
}

}  // namespace
}  // namespace kvweld::sim
