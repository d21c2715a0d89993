// The correct engine passes a swarm, and the swarm really exercises the
// contract: rebinds, rebuilds, kept plans and every op kind happen.
#include "sim/swarm.hpp"

#include <gtest/gtest.h>

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
    std::printf("%s", swarm_table(r, o).c_str());
}

}  // namespace
}  // namespace kvweld::sim
