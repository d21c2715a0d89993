// Running the serving simulator: from a seed (ops drawn as the run goes) or
// from recorded ops (replay, shrink); traces; many seeds (swarm); shrinking.
// Same config and ops, same result, whatever the engine's speed.
#pragma once

#include "sim/serve/serve_sim.hpp"

#include <functional>
#include <string>
#include <vector>

namespace kvweld::sim {

struct ServeResult {
    ServeConfig config;
    int steps = 0;
    std::vector<ServeOp> ops;  // ops run, the failing one last
    ServeStats stats;
    OracleReport oracles;
    Verdict verdict = Verdict::pass;
    std::optional<Failure> failure;
};

ServeOp draw_serve_op(const ServeSimulator& sim, Rng& rng);

// An engine that cannot be created (a broken plugin, a bad setting) throws Error.
ServeResult run_serve_generated(const ServeConfig& config, int steps, bool checked = true);
ServeResult run_serve_ops(const ServeConfig& config, const std::vector<ServeOp>& ops, int steps);

// Traces: JSON Lines, a header (format "kvweld-serve-trace", version, steps,
// config) then one op per line. A corrupt one throws Error naming the line.
// Version 2: reset and invalid ops, rewrites, forks onto open sequences,
// drawn settings and --seqs/--n-ctx in the config; a version 1 trace is
// refused (its seeds drew other ops), naming both versions.
inline constexpr int kServeTraceVersion = 2;
struct ServeTrace {
    ServeConfig config;
    int steps = 0;
    std::vector<ServeOp> ops;
};
std::string serve_trace_text(const ServeResult& r);
ServeTrace parse_serve_trace(const std::string& text, const std::string& origin = "<trace>");
bool is_serve_trace(const std::string& text);  // by its header's format

struct ServeShrinkResult {
    std::vector<ServeOp> ops;
    ServeResult result;
    int runs = 0;
};
ServeShrinkResult shrink_serve(const ServeConfig& config, const std::vector<ServeOp>& ops, int steps,
                               Verdict target, int max_runs = 2000);

// What a serving run or swarm prints: the verdict last.
std::string serve_report(const ServeResult& r);

struct ServeSwarmOptions {
    std::uint64_t first = 0, last = 0;  // inclusive
    int jobs = 1;
    int steps = 200;
    EngineChoice engine;
    std::string model;  // "" = drawn per seed
};
struct ServeSwarmResult {
    std::vector<ServeResult> seeds;  // in seed order, ops dropped
    ServeStats total;
    std::size_t failures = 0;
    OracleReport oracles;  // the first seed's (the same engine for all)
};
ServeSwarmResult run_serve_swarm(const ServeSwarmOptions& options,
                                 const std::function<void(std::size_t, std::size_t)>& progress = {});
std::string serve_swarm_table(const ServeSwarmResult& r, const ServeSwarmOptions& options);
// The command that reruns one seed alone.
std::string serve_reproduce_command(const ServeConfig& config, int steps);

}  // namespace kvweld::sim
