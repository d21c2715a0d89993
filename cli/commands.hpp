// The kvweld command line: each subcommand registers itself on the app and,
// when chosen, stores the function that runs it.
#pragma once

#include "util/cat.hpp"
#include "util/error.hpp"

#include <CLI/CLI.hpp>

#include "engine/faults.hpp"
#include "sim/sim_config.hpp"
#include "targets/registry.hpp"
#include "sim/traffic.hpp"
#include "sim/shard.hpp"
#include "sim/verdict.hpp"

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::cli {

void add_decode_command(CLI::App& app, std::function<int()>& action);
void add_convert_command(CLI::App& app, std::function<int()>& action);
void add_forward_command(CLI::App& app, std::function<int()>& action);
void add_sim_commands(CLI::App& app, std::function<int()>& action);
void add_swarm_command(CLI::App& app, std::function<int()>& action);
void add_merge_command(CLI::App& app, std::function<int()>& action);
void add_mutants_command(CLI::App& app, std::function<int()>& action);
void add_traffic_command(CLI::App& app, std::function<int()>& action);
void add_diff_command(CLI::App& app, std::function<int()>& action);
void add_versions_command(CLI::App& app, std::function<int()>& action);
void add_repro_command(CLI::App& app, std::function<int()>& action);

// Options every simulating command shares.
struct RunOptions {
    int steps = 300;
    std::string model;
    std::string backend = "cpu";
    std::vector<std::string> faults;
    std::string engine{targets::kDefaultEngine};  // a built-in name or a plugin's path
    std::string params;  // the engine's settings
    int seqs = 0, n_ctx = 0;  // --seqs, --n-ctx (0: drawn per seed)
    bool twin = false;        // --twin
    std::string known_findings;  // --known-findings ("" the engine's own file, "none", or a path)
    std::string steer;           // sim --steer: known findings whose steer the seed's config takes
    bool no_steer = false;       // swarm --no-steer: a seed stops at its first known finding
    std::string isolate = "auto";  // --isolate auto|yes|no
    double call_timeout = 60;      // --call-timeout, seconds
    std::string server;            // --server: the llama-server binary (--engine llama-server)
    std::string work_dir;          // --work-dir: the server runs' files ("": a temporary folder)
};
void add_run_options(CLI::App* cmd, RunOptions& options);
void write_json(const std::string& path, const nlohmann::json& j);
void write_text(const std::string& path, const std::string& text);
void print(const std::string& s);  // to stdout, flushed  // throws Error naming the path
// shrink's closing lines: sizes, runs, the class kept, the failure, how to replay.
void print_shrink_summary(std::size_t before, std::size_t after, int runs, sim::Verdict verdict,
                          const std::optional<sim::Failure>& failure, const std::string& out);

// The commands over the engine --engine names (cli/run_cmds.cpp).
sim::EngineChoice engine_choice(const RunOptions& options);  // throws Error on a bad combination
// sim's --no-oracles (run unchecked) and --timing (print the throughput).
struct Checking {
    bool no_oracles = false;
    bool timing = false;
};
int run_sim(const RunOptions& options, std::uint64_t seed, const std::string& trace, const std::string& json,
                   const Checking& checking = {});
// A swarm's seed range and the shard of it this run takes.
struct SeedShard {
    std::uint64_t range_first = 0, range_last = 0;
    sim::Shard shard;
};
// The swarm's gates beyond its verdicts (sim::SwarmOptions).
struct SwarmGates {
    bool terms = false;     // --require-terms
    bool coverage = false;  // --require-coverage
};
int run_swarm(const RunOptions& options, const SeedShard& seeds, int jobs, const std::string& json,
              SwarmGates gates = {});
int run_merge(const std::vector<std::pair<std::string, nlohmann::json>>& reports, const std::string& json);
int run_replay(const std::string& text, const std::string& path, const std::string& json);
// --engine llama-server (cli/server_cmds.cpp).
bool is_server_engine(const RunOptions& options);
int run_server_sim(const RunOptions& options, std::uint64_t seed, const std::string& trace);
int run_server_swarm(const RunOptions& options, std::uint64_t first, std::uint64_t last, int jobs, const SwarmGates& gates);
int run_server_replay(const std::string& text, const std::string& path, const std::string& server, const std::string& dir);
int run_server_shrink(const std::string& text, const std::string& path, const std::string& server, const std::string& out,
                      const std::string& dir, bool keep_identity);
int run_shrink(const std::string& text, const std::string& path, const std::string& out, sim::ShrinkKeep keep);
int run_mutants(const RunOptions& options, std::uint64_t seeds, int jobs, const std::string& json, bool until_killed);
struct TrafficStudyArgs {
    std::string engine{targets::kDefaultEngine}, params, csv, plot, json;
    int chunk = 16;   // prefill tokens per sequence per step
    int repeat = 3;   // runs per setting; the decode time is the best
    bool sweep = false;
};

// --seeds A..B (inclusive), checked.
std::pair<std::uint64_t, std::uint64_t> parse_seed_range(const std::string& s);
// A decimal unsigned integer and nothing else ("-3" is not 2^64 - 3).
std::optional<std::uint64_t> parse_u64(std::string_view text);
// For a seed option: refuses anything parse_u64 refuses, naming the text.
CLI::Validator seed_validator();

}  // namespace kvweld::cli
