// The oracles that read no engine report see what they are for: one stale
// KV row is far above the data oracle's tolerance, the weld and kv oracles
// catch a stale plan whose logits are right, a lying counter is caught by
// the plan identity, and a run too large to hold is refused.
#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "engine/reference.hpp"
#include "util/rng.hpp"
#include "targets/registry.hpp"
#include "sim/run.hpp"
#include "sim/tests/default_config.hpp"

#include <gtest/gtest.h>

#include <cstdio>

namespace kvweld::sim {
namespace {

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

using testing::default_config;

// A plan that keeps its old buffer after clear() writes and reads that
// buffer consistently: its logits are right while the storage the sequence
// holds misses every row. The weld and the kv oracle (reading the storage
// the ledger pinned) see that where the data oracle passes every row.
TEST(StorageOracles, CatchAStalePlanWhoseLogitsAreRight) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    int by_data = 0, by_storage = 0;
    for (std::uint64_t seed = 0; seed < 40; ++seed) {
        const RunResult r = run_generated(default_config(seed, "no_remint_on_clear"), 300);
        if (r.verdict == Verdict::pass) continue;
        by_data += r.failure->oracle == Oracle::data;
        by_storage += r.failure->oracle == Oracle::weld || r.failure->oracle == Oracle::kv;
    }
    std::printf("no_remint_on_clear over 40 seeds: first caught by data %d, by weld or kv %d\n", by_data, by_storage);
    EXPECT_GT(by_storage, 0);
    EXPECT_GT(by_storage, by_data);
}

// The counters are cross-checked against the plan's identity: a session
// that counts a rebuild as a kept plan is an engine error, not a pass.
TEST(PlanIdentity, ACounterThatLiesIsCaught) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const RunResult r = run_generated(default_config(2, "build_counted_as_kept"), 300);
    EXPECT_EQ(r.verdict, Verdict::engine_error);
    ASSERT_TRUE(r.failure.has_value());
    EXPECT_NE(r.failure->detail.find("plan serials never seen before"), std::string::npos) << r.failure->detail;
}

// A trace may ask for a run no machine here could hold: a clear error
// naming the sizes, before anything is allocated.
TEST(Simulator, RefusesAnOversizedRun) {
    SimConfig c = default_config(1);
    c.model.dim = 2048;
    c.model.n_heads = 16;
    c.model.n_kv_heads = 16;
    c.model.head_dim = 128;
    c.model.n_layers = 1;
    c.model.max_seq_len = 1 << 20;
    c.n_ctx = c.model.max_seq_len;
    c.seqs = 16;
    c.capacities = {};
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
