// The reuse study for an engine behind the ABI: the same kind of synthetic
// traffic as `kvweld traffic` (Poisson arrivals, prompt and output lengths,
// speculative drafts, preemption), served the way a continuous-batching
// server does: each tick admits what fits, retires what finished, preempts
// at random, then runs one batched step over every active sequence
// (prefill chunks and pending tokens with drafts); reloads the model and
// offloads/restores a layer (swap_layer) when the engine can. Every row is checked (data oracle) and
// every call's reuse judged by the engine's rule.
#pragma once

#include "sim/serve/serve_run.hpp"
#include "sim/traffic.hpp"

#include <map>
#include <string>

namespace kvweld::sim {

struct EngineTrafficResult {
    ServeResult run;
    double decode_seconds = 0.0;  // wall time inside the engine's decode calls
    std::map<std::string, ShapeStats> shapes;
};

// `chunk`: prefill tokens per sequence per step.
EngineTrafficResult run_engine_traffic(const TrafficParams& traffic, const EngineChoice& engine, int chunk);

// What one plan (graph) build costs, in seconds: the same one-token decode
// (then truncated back, so the shape never changes), `calls` times, on an
// engine that reuses its plan and on its twin that builds every time
// (`no_reuse`), best of `repeat`; the difference per call. Checks with the
// counters that the first engine reused every call after the first and
// the second none; throws Error otherwise.
double measure_build_seconds(const EngineChoice& reuse, const EngineChoice& no_reuse, const std::string& model,
                             int calls = 200, int repeat = 5);

}  // namespace kvweld::sim
