// Running a simulation: from a seed (ops drawn as the run goes) or from a
// recorded list of ops (replay, shrink). Same config and ops, same result.
#pragma once

#include "sim/ops.hpp"
#include "sim/sim_config.hpp"
#include "sim/simulator.hpp"
#include "sim/stats.hpp"
#include "sim/verdict.hpp"

#include <optional>
#include <vector>

namespace kvweld::sim {

struct RunResult {
    SimConfig config;
    int steps = 0;         // ops asked for
    OracleSwitches oracles;
    std::vector<Op> ops;   // ops run, the failing one last
    RunStats stats;
    Verdict verdict = Verdict::pass;
    std::optional<Failure> failure;
};

// Draws the next op for the simulator's current state.
Op draw_op(const Simulator& sim, Rng& rng);

RunResult run_generated(const SimConfig& config, int steps, OracleSwitches oracles = {});
RunResult run_ops(const SimConfig& config, const std::vector<Op>& ops, int steps,
                  OracleSwitches oracles = {});

}  // namespace kvweld::sim
