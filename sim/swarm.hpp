// Many seeds in parallel. Each seed is an independent run on one worker
// thread; results are kept in seed order, so they are the same whatever
// the number of jobs.
#pragma once

#include "sim/run.hpp"

#include <functional>
#include <string>
#include <vector>

namespace kvweld::sim {

struct SwarmOptions {
    std::uint64_t first = 0;
    std::uint64_t last = 0;  // inclusive
    int jobs = 1;
    int steps = 300;
    DrawOptions draw;
    OracleSwitches oracles;
};

struct SeedResult {
    SimConfig config;
    RunStats stats;
    Verdict verdict = Verdict::pass;
    std::optional<Failure> failure;
};

struct SwarmResult {
    std::vector<SeedResult> seeds;
    RunStats total;
    std::size_t failures = 0;
};

// progress(done, failures) is called from worker threads, serialized.
SwarmResult run_swarm(const SwarmOptions& options,
                      const std::function<void(std::size_t, std::size_t)>& progress = {});

// The closing table and one reproduce command per failure.
std::string swarm_table(const SwarmResult& r, const SwarmOptions& options);

}  // namespace kvweld::sim
