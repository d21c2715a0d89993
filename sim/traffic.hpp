// The reuse-ratio study: synthetic serving traffic in simulated time
// (Poisson arrivals, prompt and output lengths from stated distributions,
// speculative decoding, preemption, offload/restore, model reloads), run
// through the simulator with every oracle on, once per serving policy over
// the very same traffic.
#pragma once

#include "sim/run.hpp"

#include <string>
#include <vector>

namespace kvweld::sim {

struct TrafficParams {
    std::uint64_t seed = 1;
    int ticks = 400;
    int slots = 8;
    std::string model = "tiny";
    double arrival_rate = 0.5;  // requests per tick, Poisson
    int prompt_mean = 12;       // prompt length: uniform in [1, 2*mean-1]
    int output_mean = 24;       // output length: geometric with this mean, capped by capacity
    int spec_k = 4;             // 1 = no speculative decoding
    double accept = 0.6;        // per-draft acceptance probability
    double preempt_rate = 0.01; // per active request per tick: clear() and re-prefill
    double offload_rate = 0.01; // per active request per tick: set_layer() of a restored copy
    double reload_rate = 0.002; // per tick: the model is reloaded (same shape)
    double reload_new_weights = 0.5;
};

struct Policy {
    std::string name;
    CachePolicy cache;
    RebindPolicy on_change;
};
std::vector<Policy> study_policies();  // fresh+rebuild, fresh+rebind, recycle

struct PolicyResult {
    Policy policy;
    RunResult run;
};

// The same traffic (same seed) under one policy.
PolicyResult run_traffic(const TrafficParams& params, const Policy& policy);

// Measured on this machine, seconds: one plan build, one rebind, one kept decode.
struct OpCosts {
    double build = 0, rebind = 0, decode = 0;
};
OpCosts measure_op_costs(const ModelConfig& config);

}  // namespace kvweld::sim
