// Shards partition a seed range, and merging every shard's report gives the
// unsharded run's report byte for byte; reports that are not the shards of
// one campaign are refused with the reason.
#include "util/error.hpp"
#include "sim/json_report.hpp"
#include "sim/run.hpp"
#include "sim/shard.hpp"

#include <gtest/gtest.h>

namespace kvweld::sim {
namespace {

constexpr int kSteps = 60;

SwarmOptions options(std::uint64_t first, std::uint64_t last) {
    SwarmOptions o;
    o.first = first;
    o.last = last;
    o.steps = kSteps;
    o.jobs = 2;
    return o;
}

nlohmann::json shard_report(std::uint64_t first, std::uint64_t last, Shard s) {
    SwarmOptions o = options(first, last);
    std::tie(o.first, o.last) = shard_range(first, last, s);
    return swarm_json(run_swarm(o), o, first, last, s);
}

TEST(Shard, ShardsPartitionTheRange) {
    for (auto [first, last, n] : {std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>{0, 9, 3}, {5, 5, 1},
                                  {100, 199, 16}, {7, 13, 7}}) {
        std::uint64_t next = first;
        for (std::uint64_t i = 0; i < n; ++i) {
            const auto [lo, hi] = shard_range(first, last, {i, n});
            EXPECT_EQ(lo, next) << "shard " << i << "/" << n;  // contiguous, disjoint, in order
            EXPECT_LE(lo, hi);
            next = hi + 1;
        }
        EXPECT_EQ(next, last + 1);  // the union is the range
    }
    EXPECT_THROW(shard_range(0, 2, {0, 4}), Error);
    EXPECT_THROW(parse_shard("3/3"), Error);
    EXPECT_THROW(parse_shard("-1/3"), Error);
    EXPECT_EQ(parse_shard("2/16").index, 2u);
}

TEST(Shard, MergeEqualsTheUnshardedRun) {
    for (auto [first, last, n] : {std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>{0, 11, 3}, {20, 26, 7},
                                  {3, 12, 1}, {0, 9, 4}}) {
        const nlohmann::json whole = shard_report(first, last, {0, 1});
        std::vector<std::pair<std::string, nlohmann::json>> parts;
        for (std::uint64_t i = n; i-- > 0;)  // given in reverse order
            parts.emplace_back("shard" + std::to_string(i), shard_report(first, last, {i, n}));
        const Merged m = merge_reports(parts);
        EXPECT_EQ(m.report.dump(2), whole.dump(2)) << first << ".." << last << " in " << n;
        EXPECT_EQ(m.result.seeds.size(), last - first + 1);
    }
}

void expect_refused(const std::vector<std::pair<std::string, nlohmann::json>>& parts, const std::string& why) {
    try {
        merge_reports(parts);
        ADD_FAILURE() << "expected the merge to be refused: " << why;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
}

TEST(Shard, MismatchedReportsAreRefused) {
    const nlohmann::json a = shard_report(0, 5, {0, 2}), b = shard_report(0, 5, {1, 2});
    expect_refused({{"a", a}}, "shard 1/2 is missing");
    expect_refused({{"a", a}, {"a again", a}, {"b", b}}, "given twice");
    nlohmann::json other_build = b;
    other_build["build"] = "kvweld 0123456789ab faults";
    expect_refused({{"a", a}, {"b", other_build}}, "differ in 'build'");
    nlohmann::json other_steps = b;
    other_steps["steps"] = kSteps + 1;
    expect_refused({{"a", a}, {"b", other_steps}}, "differ in 'steps'");
    nlohmann::json other_engine = b;
    other_engine["engine"]["name"] = "kvweld";
    expect_refused({{"a", a}, {"b", other_engine}}, "differ in 'engine'");
    nlohmann::json wrong_seeds = b;
    wrong_seeds["seeds"].erase(0);
    expect_refused({{"a", a}, {"b", wrong_seeds}}, "does not hold exactly the seeds");
    expect_refused({{"a", a}, {"junk", nlohmann::json::object()}}, "not a kvweld swarm report");
}

}  // namespace
}  // namespace kvweld::sim
