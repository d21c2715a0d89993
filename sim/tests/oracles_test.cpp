// The oracles that read no engine report see what they are for, and the
// ledger refuses storage that is not new.
#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "engine/faults.hpp"
#include "engine/reference.hpp"
#include "engine/rng.hpp"
#include "sim/ledger.hpp"
#include "sim/run.hpp"

#include <gtest/gtest.h>

#include <cstdio>

namespace kvweld::sim {
namespace {

KvLayer storage() { return std::make_shared<KvStorage>(4, 8); }

TEST(Ledger, AcceptsNewDistinctStorageOnly) {
    StorageLedger ledger;
    const KvLayer a = storage(), b = storage(), c = storage();
    EXPECT_FALSE(ledger.accept({a, b}).has_value());
    // A "replacement" that hands back storage the run has seen.
    const auto reused = ledger.accept({c, a});
    ASSERT_TRUE(reused.has_value());
    EXPECT_NE(reused->find("layer 1"), std::string::npos) << *reused;
    EXPECT_NE(reused->find("seen before"), std::string::npos) << *reused;
    // One buffer reported for two layers.
    const KvLayer d = storage();
    const auto shared = ledger.accept({d, d});
    ASSERT_TRUE(shared.has_value());
    EXPECT_NE(shared->find("shared with another layer"), std::string::npos) << *shared;
    // A refused report records nothing: c is still new.
    EXPECT_FALSE(ledger.accept({c}).has_value());
}

// What one skipped KV write looks like to the data oracle: a sequence
// rewound and fed a different token at position p, whose K/V rows an
// engine failed to write, so every layer still holds the old token's rows
// there. The next position's logits, against the reference's, must be far
// above the tolerance for every model the swarms draw; the smallest
// margin is printed (a ratio to kDataTolerance).
TEST(DataOracleMargin, OneStaleKvRowIsFarAboveTheTolerance) {
    double smallest = 1e300;
    std::string where;
    for (std::string_view name : swarm_model_names()) {
        const ModelConfig config = config_by_name(name);
        const Model model = Model::random(config, 5);
        Rng rng(17);
        for (int trial = 0; trial < 8; ++trial) {
            const int len = int(rng.range(2, std::min(24, config.max_seq_len - 1)));
            const int p = int(rng.below(std::uint64_t(len)));
            std::vector<int> tokens(std::size_t(len) + 1);
            for (int& t : tokens) t = int(rng.below(std::uint64_t(config.vocab)));
            ReferenceKv right(config), stale(config);
            for (int i = 0; i < len; ++i) {
                // `stale` wrote the old token's rows at p: the write of the new one was skipped.
                const int old = (tokens[std::size_t(i)] + 1) % config.vocab;
                reference_forward(model, right, tokens[std::size_t(i)], i);
                reference_forward(model, stale, i == p ? old : tokens[std::size_t(i)], i);
            }
            const std::vector<float> want = reference_forward(model, right, tokens.back(), len);
            const std::vector<float> got = reference_forward(model, stale, tokens.back(), len);
            const double margin = logit_error(got, want) / kDataTolerance;
            if (margin < smallest) {
                smallest = margin;
                where = cat(name, ", length ", len, ", stale position ", p);
            }
        }
    }
    std::printf("one stale KV row: smallest logit error %.3g x the tolerance (%s)\n", smallest, where.c_str());
    EXPECT_GT(smallest, 10.0) << where;
}

struct Kills {
    int by_data_only = 0, by_kv_only = 0, kv_but_not_data = 0;
};

Kills kills(Fault fault, std::uint64_t seeds) {
    Kills k;
    for (std::uint64_t seed = 0; seed < seeds; ++seed) {
        DrawOptions draw;
        draw.faults.add(fault);
        const SimConfig c = draw_config(seed, draw);
        const bool data = run_generated(c, 300, {true, false, false, false}).verdict != Verdict::pass;
        const bool kv = run_generated(c, 300, {false, true, false, false}).verdict != Verdict::pass;
        k.by_data_only += data;
        k.by_kv_only += kv;
        k.kv_but_not_data += kv && !data;
    }
    return k;
}

// A plan that keeps its old buffer after clear() writes and reads that
// buffer consistently: its logits are right while the storage the cache
// holds misses every row. Only the KV content oracle sees that.
TEST(KvOracle, CatchesAStalePlanWhoseLogitsAreRight) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const Kills k = kills(Fault::no_remint_on_clear, 40);
    std::printf("no_remint_on_clear over 40 seeds: data oracle alone %d, kv oracle alone %d, kv but not data %d\n",
                k.by_data_only, k.by_kv_only, k.kv_but_not_data);
    EXPECT_GT(k.kv_but_not_data, 0);
    EXPECT_GT(k.by_kv_only, k.by_data_only);
}

// The other half: on the correct engine the KV oracle never fires.
TEST(KvOracle, PassesTheCorrectEngine) {
    for (std::uint64_t seed = 0; seed < 40; ++seed) {
        const RunResult r = run_generated(draw_config(seed), 300, {false, true, false, false});
        EXPECT_EQ(r.verdict, Verdict::pass) << "seed " << seed << ": " << (r.failure ? r.failure->detail : "");
        EXPECT_LE(r.stats.max_kv_error, 1e-4);
    }
}

// The counters are cross-checked against the plan's identity: a session
// that counts a rebuild as a kept plan is an engine error, not a pass.
TEST(PlanIdentity, ACounterThatLiesIsCaught) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    DrawOptions draw;
    draw.faults.add(Fault::build_counted_as_kept);
    const RunResult r = run_generated(draw_config(0, draw), 300);
    EXPECT_EQ(r.verdict, Verdict::engine_error);
    ASSERT_TRUE(r.failure.has_value());
    EXPECT_NE(r.failure->detail.find("plan's identity changed"), std::string::npos) << r.failure->detail;
}

// A trace may ask for a model whose caches no machine here could hold: a
// clear error naming the sizes, before anything is allocated.
TEST(Simulator, RefusesAnOversizedRun) {
    SimConfig c = draw_config(1);
    c.model.dim = 2048;
    c.model.n_heads = 16;
    c.model.n_kv_heads = 16;
    c.model.head_dim = 128;
    c.model.n_layers = 1;
    c.model.max_seq_len = 1 << 20;
    c.capacities = {c.model.max_seq_len};
    try {
        run_generated(c, 10);
        ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("bytes"), std::string::npos) << what;
        EXPECT_NE(what.find("limit"), std::string::npos) << what;
    }
}

}  // namespace
}  // namespace kvweld::sim
