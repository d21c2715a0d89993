// Running the server simulator: a seed's generated run, a trace's replay,
// shrinking a failing trace, many seeds (the swarm of --engine
// llama-server), and the server script a finding becomes.
#pragma once

#include "sim/server/server_sim.hpp"

#include <functional>
#include <string>
#include <vector>

namespace kvweld::sim::server {

struct ServerRunResult {
    ServerRunConfig config;
    int steps = 0;
    std::vector<ServerOp> ops;              // ops run, the failing one last
    std::vector<nlohmann::json> observed;   // per op: what the server chose
    ServerVerdict verdict = ServerVerdict::pass;
    std::optional<ServerFailure> failure;
    ServerTally tally;
    // A replay's: the first op where the server chose otherwise than the
    // trace recorded (another slot, other cache hits, other tokens), "" none.
    std::string diverged;
    std::string log;  // the server's log
};

// The config a seed draws (its settings) for a model of `arch`, its files under work_dir.
ServerRunConfig server_config(const std::string& server, const std::string& preset, const std::string& arch,
                              std::uint64_t seed, const std::string& work_dir);
ServerRunResult run_server_generated(const ServerRunConfig& config, int steps);
// `recorded`: what a trace says the server chose (empty: nothing to compare).
ServerRunResult run_server_ops(const ServerRunConfig& config, const std::vector<ServerOp>& ops,
                               const std::vector<nlohmann::json>& recorded = {},
                               const std::function<void(ServerSim&)>& before = {});

// Traces: JSON Lines, a header (format "kvweld-server-trace", version,
// seed, preset, settings, steps) then one op per line, each with what the
// server chose ("got"). A corrupt one throws Error naming the line. The
// server binary is not in it: a trace replays on any build.
inline constexpr const char* kServerTraceFormat = "kvweld-server-trace";
inline constexpr int kServerTraceVersion = 1;
struct ServerTrace {
    ServerRunConfig config;  // server and work_dir left empty
    int steps = 0;
    std::vector<ServerOp> ops;
    std::vector<nlohmann::json> observed;
};
std::string server_trace_text(const ServerRunResult& r);
ServerTrace parse_server_trace(const std::string& text, const std::string& origin);
bool is_server_trace(const std::string& text);  // its header names kServerTraceFormat

// The failing ops made fewer (delta debugging), the failure's verdict and
// oracle kept, and what `same` asks of a candidate's run besides (the CLI:
// the known finding it is, or none, so a shrink does not drift into
// another bug); at most max_runs runs, each with a server of its own.
struct ServerShrinkResult {
    ServerRunResult result;
    std::size_t before = 0;
    int runs = 0;
};
ServerShrinkResult shrink_server(const ServerRunConfig& config, const std::vector<ServerOp>& ops, int max_runs,
                                 const std::function<void(int)>& progress = {},
                                 const std::function<bool(const ServerRunResult&)>& same = {});

// What a run prints: its settings, the oracles' lines, the verdict last.
std::string server_report(const ServerRunResult& r);

struct ServerSwarmOptions {
    std::string server;
    std::string preset = "small";
    std::string arch = "llama";  // the model's architecture (ServerSettings::arch)
    std::uint64_t first = 0, last = 0;
    int steps = 60;
    int jobs = 1;
    std::string work_dir;  // each failing seed's trace and logs under it
    // Known findings (sim/server/server_known.hpp): "" the pinned release's
    // file, "none", or a file's path.
    std::string known_findings;
    double request_timeout_s = 60;  // each request's, and the server's start
    // A seed that meets a known finding with a steer runs again with the
    // steer's settings (a server of their own), until it passes, fails
    // otherwise, or meets a finding it was steered past; its runs' tallies
    // add up. false: a seed stops at its first known finding.
    bool steer = true;
    // Fail where an op variant was never sent or a settings field never
    // drawn with a second value over the seeds (swarm --require-terms).
    bool require_terms = false;
};
struct ServerSwarmResult {
    std::vector<ServerRunResult> seeds;      // in seed order, ops dropped: each seed's last run
    ServerTally total;                       // every run's, steered ones too
    std::vector<std::string> known;          // per seed: the known finding its failure is ("" none)
    std::vector<std::vector<std::string>> steered_past;  // per seed: the known findings it was steered past, in order
    std::size_t failures = 0, known_failures = 0, steered = 0;
    std::string known_path;                  // "" none
    std::vector<std::string> unreproduced;   // known findings whose trace no longer fails as recorded
    std::vector<std::string> unexercised;    // require_terms: the op variants never sent, the settings fields never varied
    // No new failure, and every known finding still reproduces: what CI gates on.
    bool ok() const { return failures == known_failures && unreproduced.empty() && unexercised.empty(); }
};
ServerSwarmResult run_server_swarm(const ServerSwarmOptions& options,
                                   const std::function<void(std::size_t, std::size_t)>& progress = {});
std::string server_swarm_table(const ServerSwarmResult& r, const ServerSwarmOptions& options);

// A finding's server script (sim/server/server_script.cpp), from a failing
// run: a standalone shell script that starts llama-server with the run's
// flags on 127.0.0.1 (an ephemeral port, stopped by its PID), sends the
// run's requests with curl, prints the failing request's answer against
// kvweld's reference (and the cache model's cache_n), written in for the
// run's model, and exits 1 when the finding shows, 0 when not, 2 when it
// cannot run. `command` is named in its header. Throws Error where the
// expected answer is not one it computes (a chunk-shifted one, a slot
// action's count).
std::string server_script(const ServerRunResult& r, const std::string& command);

// The files a run's server script takes, in its argument order (the
// model, each LoRA adapter, the draft model): each one's name, the command
// that writes it, and its bytes. The flags that load them are the
// simulator's (server_args).
struct ServerScriptFile {
    std::string name, convert;
    std::vector<std::byte> bytes;
};
std::vector<ServerScriptFile> server_script_files(const ServerRunConfig& config);

}  // namespace kvweld::sim::server
