// Shrinking a failing trace: delta debugging over the ops, then over each
// op's arguments, keeping only changes that fail the same way.
#pragma once

#include "sim/run.hpp"

#include <functional>

namespace kvweld::sim {

struct ShrinkResult {
    std::vector<Op> ops;
    RunResult result;  // the run of the shrunk ops
    int runs = 0;      // simulations tried
};

// `ops` must fail with `target`; throws Error otherwise.
ShrinkResult shrink(const SimConfig& config, const std::vector<Op>& ops, int steps, Verdict target,
                    int max_runs = 5000);

}  // namespace kvweld::sim
