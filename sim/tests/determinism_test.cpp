// One seed decides everything: the same seed gives byte-identical traces
// and reports, and a swarm's per-seed results do not depend on --jobs.
#include "sim/report.hpp"
#include "sim/swarm.hpp"
#include "sim/trace.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvweld::sim {
namespace {

TEST(Determinism, SameSeedSameTraceAndReport) {
    for (std::uint64_t seed : {1ull, 17ull, 123456789ull}) {
        const RunResult a = run_generated(draw_config(seed), 200);
        const RunResult b = run_generated(draw_config(seed), 200);
        EXPECT_EQ(trace_text(a.config, 200, a.ops), trace_text(b.config, 200, b.ops)) << seed;
        EXPECT_EQ(text_report(a), text_report(b)) << seed;
        EXPECT_EQ(json_report(a).dump(), json_report(b).dump()) << seed;
        EXPECT_GT(a.stats.decodes, 0u);
    }
}

TEST(Determinism, DifferentSeedsDiffer) {
    const RunResult a = run_generated(draw_config(1), 100);
    const RunResult b = run_generated(draw_config(2), 100);
    EXPECT_NE(trace_text(a.config, 100, a.ops), trace_text(b.config, 100, b.ops));
}

std::string per_seed(const SwarmResult& r) {
    std::string out;
    for (const SeedResult& s : r.seeds)
        out += json_report(RunResult{s.config, 120, {}, {}, s.stats, s.verdict, s.failure}).dump() + "\n";
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

TEST(Determinism, NamingTheDrawnModelGivesTheSameConfig) {
    const SimConfig drawn = draw_config(5);
    const SimConfig named = draw_config(5, DrawOptions{.model = drawn.model_name, .backend = Backend::cpu, .faults = {}});
    EXPECT_EQ(nlohmann::json(drawn).dump(), nlohmann::json(named).dump());
}

}  // namespace
}  // namespace kvweld::sim
