// The correct engine passes a swarm, and the swarm really exercises the
// contract: rebinds, rebuilds, kept plans and every op kind happen.
#include "sim/swarm.hpp"

#include <gtest/gtest.h>

#include <set>

namespace kvweld::sim {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr std::uint64_t kSeeds = 60;  // the sanitizer build is ~10x slower
#else
constexpr std::uint64_t kSeeds = 300;
#endif

TEST(Swarm, CorrectEnginePassesEverySeed) {
    SwarmOptions o;
    o.first = 0;
    o.last = kSeeds - 1;
    o.steps = 300;
    o.jobs = 2;
    const SwarmResult r = run_swarm(o);
    EXPECT_EQ(r.failures, 0u) << swarm_table(r, o);
    const RunStats& t = r.total;
    EXPECT_EQ(t.spurious, 0u);
    EXPECT_EQ(t.missed, 0u);
    EXPECT_EQ(t.kept, t.justified_kept);
    EXPECT_EQ(t.rebound, t.justified_rebinds);
    EXPECT_EQ(t.rebuilt, t.justified_builds);
    // the run is not vacuous
    EXPECT_GT(t.kept, t.decodes / 2);
    EXPECT_GT(t.rebound, 100u);
    EXPECT_GT(t.rebuilt, 100u);
    EXPECT_GT(t.change_decodes, t.data_blind);  // some changes were visible to the data oracle
    EXPECT_GT(t.capacity_rebuilds, 0u);         // a rebind refused for capacity, then a rebuild
    // Every change a data-reading oracle cannot see is a same-weights reload,
    // where a plan that missed it is exactly right.
    EXPECT_EQ(t.independent_blind, t.blind_same_weights_reload);
    EXPECT_LE(t.max_kv_error, 1e-4);
    std::printf("%s", swarm_table(r, o).c_str());
}

// The default swarm draws both families, GQA and MHA, several layer
// counts, and caches smaller than the model as well as full-size ones.
TEST(Swarm, DrawsEveryKindOfModelAndCache) {
    bool llama = false, qwen3 = false, gqa = false, mha = false, small_cache = false, full_cache = false;
    std::set<int> layers;
    for (std::uint64_t seed = 0; seed < 100; ++seed) {
        const SimConfig c = draw_config(seed);
        llama |= c.model.family == Family::llama;
        qwen3 |= c.model.family == Family::qwen3;
        gqa |= c.model.n_kv_heads < c.model.n_heads;
        mha |= c.model.n_kv_heads == c.model.n_heads;
        layers.insert(c.model.n_layers);
        for (int cap : c.capacities) {
            EXPECT_GT(cap, c.max_prompt);
            EXPECT_LE(cap, c.model.max_seq_len);
            small_cache |= cap < c.model.max_seq_len;
            full_cache |= cap == c.model.max_seq_len;
        }
    }
    EXPECT_TRUE(llama && qwen3 && gqa && mha && small_cache && full_cache);
    EXPECT_GE(layers.size(), 2u);
}

}  // namespace
}  // namespace kvweld::sim
