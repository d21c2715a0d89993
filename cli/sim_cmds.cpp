// `kvweld sim`, `replay` and `shrink`: one run, its replay, its minimization
// (cli/run_cmds.cpp runs them), and the options every simulating command shares.
#include "cli/commands.hpp"

#include "sim/server/server_run.hpp"

#include "sim/jsonl.hpp"
#include "sim/report.hpp"
#include "targets/registry.hpp"
#include "sim/run.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>

namespace kvweld::cli {

using namespace kvweld::sim;

void write_json(const std::string& path, const nlohmann::json& j) {
    std::ofstream out(path, std::ios::trunc);
    require(out.good(), "--json ", path, ": cannot open for writing");
    out << j.dump(2) << "\n";
}

std::optional<std::uint64_t> parse_u64(std::string_view text) {
    std::uint64_t value = 0;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || err != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
}

CLI::Validator seed_validator() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            if (parse_u64(text)) return {};
            return cat("seed '", text, "': expected an unsigned integer in 0..18446744073709551615");
        },
        "SEED");
}

void add_run_options(CLI::App* cmd, RunOptions& o) {
    cmd->add_option("--steps", o.steps, "ops per run")->capture_default_str()->check(CLI::Range(1, 1000000));
    cmd->add_option("--model", o.model,
                    kvweld::cat("model dims: ", kvweld::preset_names(),
                                " (default: drawn per seed; behind the ABI, llama-family only)"));
    cmd->add_option("--backend", o.backend, "cpu or cuda (kvweld's engine in process; a plugin picks its own)")
        ->capture_default_str();
    cmd->add_option("--fault", o.faults,
                    "turn one of the engine's fault switches on (repeatable; kvweld mutants --engine E lists them)");
    cmd->add_option("--engine", o.engine,
                    cat("the engine: ", builtin_engine_names(), ", or a plugin's path (.so); default ", kDefaultEngine,
                        ", kvweld's own engine in this process, with the white-box oracles. llama-server (llama-server@R: release R's "
                        "build in the cache, llama-server@b11434+fixes the pinned one with the checked fixes) is a server process "
                        "driven over HTTP, its requests judged by the server oracles. Every oracle the engine's "
                        "capabilities allow runs, and the report says which could not and why"))
        ->capture_default_str();
    cmd->add_option("--params", o.params,
                    "the engine's settings, k=v,... (inproc and kvweld: policy=rebind|rebuild, backend=cpu|cuda, reuse=0; llamacpp: "
                    "kv_unified=0|1, graph_reuse=0|1; kvweld-paged: block=N, blocks=N, backend=cpu|cuda); a setting "
                    "not given is drawn per seed");
    cmd->add_option("--seqs", o.seqs, "sequences open at once, for every seed (default: drawn, 1..16)")
        ->check(CLI::Range(1, 256));
    cmd->add_option("--n-ctx", o.n_ctx, "positions per sequence, for every seed (default: drawn)")
        ->check(CLI::Range(2, 4096));
    cmd->add_flag("--twin", o.twin,
                  "also run the differential twin: the same engine with plan reuse off, in lockstep; every row must "
                  "equal its row bit for bit (inproc, kvweld, llamacpp; about three times the decode cost)");
    cmd->add_option("--known-findings", o.known_findings,
                    "the engine release's known findings (failures that are bugs in the engine, each minimized with its trace): a "
                    "failure that matches one is reported as that finding, not a pass and not a new failure; each one's "
                    "trace must still fail as recorded. Default: the engine's own file (llamacpp: "
                    "targets/llamacpp/known_findings/b11434.json); none: no file");
    cmd->add_option("--isolate", o.isolate,
                    "run an engine behind the ABI in a process of its own, so that its abort, signal or hang is an "
                    "engine error with the trace up to that call and the run goes on: yes, no, or auto (the engine's "
                    "choice: llamacpp yes, the others no)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "yes", "no"}));
    cmd->add_option("--server", o.server,
                    "with --engine llama-server: the llama-server binary kvweld starts on 127.0.0.1 (default: the cache's "
                    "build --engine names, $KVWELD_CACHE/llama.cpp[-R]/install/bin/llama-server, which scripts/setup builds)");
    cmd->add_option("--work-dir", o.work_dir,
                    "with --engine llama-server: where each run's model, server logs, slot files and (failing) trace go "
                    "(default: a temporary folder, removed when every run passes)");
    cmd->add_option("--call-timeout", o.call_timeout,
                    "in a process of its own, the seconds an engine has to answer one call before it is killed as hung; "
                    "with --engine llama-server, the seconds a server has to start and to answer each request")
        ->capture_default_str()
        ->check(CLI::Range(0.1, 86400.0));
}

namespace {

struct SimArgs {
    RunOptions run;
    std::uint64_t seed = 0;
    std::string trace, json;
    bool no_oracles = false;
    bool timing = false;
};

}  // namespace

void print_shrink_summary(std::size_t before, std::size_t after, int runs, Verdict verdict,
                          const std::optional<Failure>& failure, const std::string& out) {
    std::printf("shrink: %zu ops -> %zu ops in %d runs, still %s\n", before, after, runs,
                std::string(to_string(verdict)).c_str());
    if (failure)
        std::printf("  %s oracle at op %zu (%s): %s\n", std::string(to_string(failure->oracle)).c_str(),
                    failure->op_index, failure->op.c_str(), failure->detail.c_str());
    std::printf("reproduce: kvweld replay %s\n", out.c_str());
}

namespace {

constexpr const char* kVerdictExits =
    "Exit 0 pass, 3 stale decode (twin, data, kv, weld or blocks oracle), 4 spurious invalidation, 5 missed invalidation, "
    "6 engine error, 7 rows differ and 8 reuse differs (a trace kvweld diff wrote), 2 bad input or usage, 70 internal error";

}  // namespace

void add_sim_commands(CLI::App& app, std::function<int()>& action) {
    auto sim = std::make_shared<SimArgs>();
    CLI::App* cmd = app.add_subcommand("sim", cat("One simulated run: seed and config first, verdict last. ",
                                                  kVerdictExits));
    cmd->add_option("--seed", sim->seed, "the one seed that decides the run")->required()->check(seed_validator());
    add_run_options(cmd, sim->run);
    cmd->add_option("--steer", sim->run.steer,
                    "known findings (id,id) the seed is steered around, as a swarm steers a seed that met them: "
                    "each finding's steer (its ops never drawn, its settings set) applied to the drawn config");
    cmd->add_option("--trace", sim->trace, "write the run's trace (JSON Lines) here");
    cmd->add_option("--json", sim->json, "write the report as JSON here");
    cmd->add_flag("--no-oracles", sim->no_oracles, "run unchecked (measures the harness overhead)");
    cmd->add_flag("--timing", sim->timing, "print rows (decoded tokens) per second to stderr");
    cmd->callback([sim, &action] {
        action = [sim] { return run_sim(sim->run, sim->seed, sim->trace, sim->json, {sim->no_oracles, sim->timing}); };
    });

    struct ReplayArgs {
        std::string trace, json, server, work_dir;
    };
    auto replay = std::make_shared<ReplayArgs>();
    CLI::App* rcmd = app.add_subcommand("replay", cat("Re-run a trace; prints the same report byte for byte (a server "
                                                      "trace: the same requests, and where the server chose otherwise "
                                                      "than recorded). ", kVerdictExits));
    rcmd->add_option("TRACE", replay->trace, "trace file written by sim --trace, swarm or shrink")->required();
    rcmd->add_option("--json", replay->json, "write the report as JSON here");
    rcmd->add_option("--server", replay->server, "a server trace's llama-server binary");
    rcmd->add_option("--work-dir", replay->work_dir, "a server trace's run files (default: a temporary folder)");
    rcmd->callback([replay, &action] {
        action = [replay] {
            const std::string text = read_text_file(replay->trace);
            if (sim::server::is_server_trace(text))
                return run_server_replay(text, replay->trace, replay->server, replay->work_dir);
            return run_replay(text, replay->trace, replay->json);
        };
    });

    struct ShrinkArgs {
        std::string trace, output, keep = "identity", server, work_dir;
    };
    auto shrink_args = std::make_shared<ShrinkArgs>();
    CLI::App* scmd = app.add_subcommand(
        "shrink", "Minimize a failing trace, keeping its failure's identity: the verdict, the oracle, the contract "
                  "clause and the kind of message (its text with the numbers left out), so the shrunk trace is the "
                  "same bug");
    scmd->add_option("TRACE", shrink_args->trace, "a failing trace")->required();
    scmd->add_option("-o,--output", shrink_args->output, "where to write the minimized trace")->required();
    scmd->add_option("--keep", shrink_args->keep,
                     "identity (default), or verdict: keep only the verdict, which may end in another bug of the "
                     "same class")
        ->check(CLI::IsMember({"identity", "verdict"}));
    scmd->add_option("--server", shrink_args->server,
                     "a server trace's llama-server binary (a server trace keeps its verdict, its oracle and, with --keep identity, "
                     "the known finding of the pinned release it is, or none)");
    scmd->add_option("--work-dir", shrink_args->work_dir, "a server trace's run files (default: a temporary folder)");
    scmd->callback([shrink_args, &action] {
        action = [shrink_args] {
            const std::string text = read_text_file(shrink_args->trace);
            if (sim::server::is_server_trace(text))
                return run_server_shrink(text, shrink_args->trace, shrink_args->server, shrink_args->output,
                                         shrink_args->work_dir, shrink_args->keep == "identity");
            return run_shrink(text, shrink_args->trace, shrink_args->output,
                              shrink_args->keep == "verdict" ? ShrinkKeep::verdict : ShrinkKeep::identity);
        };
    });
}

}  // namespace kvweld::cli
