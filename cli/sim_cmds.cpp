// `kvweld sim`, `replay` and `shrink`: one run, its replay, its minimization.
#include "cli/commands.hpp"

#include "sim/jsonl.hpp"
#include "sim/report.hpp"
#include "engines/registry.hpp"
#include "sim/serve/serve_run.hpp"
#include "sim/shrink.hpp"
#include "sim/trace.hpp"

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

FaultSet parse_faults(const std::vector<std::string>& names) {
    FaultSet set;
    for (const std::string& name : names) {
        set.add(require_fault(name, FaultDesign::dense));
    }
    require(set.empty() || kFaultsCompiled,
            "--fault needs a build with fault switches (KVWELD_FAULTS); this one has none");
    return set;
}

void add_run_options(CLI::App* cmd, RunOptions& o) {
    cmd->add_option("--steps", o.steps, "ops per run")->capture_default_str()->check(CLI::Range(1, 1000000));
    cmd->add_option("--model", o.model,
                    kvweld::cat("model dims: ", kvweld::preset_names(), " (default: drawn per seed)"));
    cmd->add_option("--backend", o.backend, "cpu or cuda")->capture_default_str();
    cmd->add_option("--fault", o.faults,
                    cat("turn a fault switch on (repeatable): ", fault_names(),
                        "; with --engine, one of the engine's own (see kvweld mutants --engine E)"));
    cmd->add_option("--engine", o.engine,
                    cat("drive an engine through the plugin ABI instead of kvweld's own in-process: ",
                        builtin_engine_names(), ", or a plugin's path (.so); every oracle its capabilities allow "
                        "runs, and the report says which could not and why"));
    cmd->add_option("--params", o.params,
                    "the --engine's settings, k=v,... (llamacpp: kv_unified=0|1, graph_reuse=0|1; kvweld-paged: "
                    "block=N, blocks=N, backend=cpu|cuda); a setting not given is drawn per seed");
    cmd->add_option("--seqs", o.seqs, "with --engine: sequences open at once, for every seed (default: drawn, 1..16)")
        ->check(CLI::Range(1, 256));
    cmd->add_option("--n-ctx", o.n_ctx, "with --engine: positions per sequence, for every seed (default: drawn)")
        ->check(CLI::Range(2, 4096));
}

DrawOptions draw_options(const RunOptions& o) {
    require(!o.seqs && !o.n_ctx, "--seqs and --n-ctx need --engine: kvweld's in-process simulator draws its slots "
                                 "and cache capacities per seed");
    const Backend backend = backend_from_string(o.backend);
    std::string why;
    require(backend != Backend::cuda || cuda_backend_available(&why), "CUDA backend unavailable: ", why);
    return DrawOptions{o.model, backend, parse_faults(o.faults)};
}

namespace {

void print(const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

int finish(const RunResult& r, const std::string& json) {
    print(report_body(r));
    if (!json.empty()) write_json(json, json_report(r));
    return exit_code(r.verdict);
}

struct SimArgs {
    RunOptions run;
    std::uint64_t seed = 0;
    std::string trace, json;
    bool no_oracles = false;
    bool timing = false;
};

int run_sim(const SimArgs& a) {
    if (!a.run.engine.empty()) return run_engine_sim(a.run, a.seed, a.trace, a.json, {a.no_oracles, a.timing});
    const SimConfig config = draw_config(a.seed, draw_options(a.run));
    if (config.paged && !a.no_oracles && !a.timing) {  // as the swarm runs it
        std::printf("seed %llu draws the paged KV design: kvweld's paged engine through the serving simulator "
                    "(the same as --engine kvweld-paged)\n",
                    static_cast<unsigned long long>(a.seed));
        RunOptions paged = a.run;
        paged.engine = "kvweld-paged";
        return run_engine_sim(paged, a.seed, a.trace, a.json);
    }
    const RunResult header_only{config, a.run.steps, {}, {}, {}, Verdict::pass, std::nullopt};
    print(report_header(header_only));
    const OracleSwitches oracles = a.no_oracles ? OracleSwitches::none() : OracleSwitches{};
    const auto start = std::chrono::steady_clock::now();
    const RunResult r = run_generated(config, a.run.steps, oracles);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (a.timing)
        std::fprintf(stderr, "timing: %llu decodes in %.3f s = %.0f decodes/s (oracles %s)\n",
                     static_cast<unsigned long long>(r.stats.decodes), secs, r.stats.decodes / secs,
                     a.no_oracles ? "off" : "on");
    if (!a.trace.empty()) write_trace(a.trace, config, a.run.steps, r.ops);
    return finish(r, a.json);
}

int run_replay(const std::string& path, const std::string& json) {
    const std::string text = read_text_file(path);
    if (is_serve_trace(text)) return run_engine_replay(text, path, json);
    const Trace t = parse_trace(text, path);
    const RunResult r = run_ops(t.config, t.ops, t.steps);
    print(report_header(r));
    return finish(r, json);
}

int run_shrink(const std::string& path, const std::string& out) {
    const std::string text = read_text_file(path);
    if (is_serve_trace(text)) return run_engine_shrink(text, path, out);
    const Trace t = parse_trace(text, path);
    const RunResult original = run_ops(t.config, t.ops, t.steps);
    require(original.verdict != Verdict::pass, "shrink: ", path, " passes; there is nothing to shrink");
    std::printf("shrink: %s fails with %s after %zu ops; minimizing...\n", path.c_str(),
                std::string(to_string(original.verdict)).c_str(), original.ops.size());
    std::fflush(stdout);
    const ShrinkResult s = shrink(t.config, original.ops, t.steps, original.verdict);
    write_trace(out, t.config, t.steps, s.ops);
    print_shrink_summary(original.ops.size(), s.ops.size(), s.runs, s.result.verdict, s.result.failure, out);
    return 0;
}

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
    "Exit 0 pass, 3 stale decode (data, kv or weld oracle), 4 spurious invalidation, 5 missed invalidation, "
    "6 engine error, 2 bad input or usage, 70 internal error";

}  // namespace

void add_sim_commands(CLI::App& app, std::function<int()>& action) {
    auto sim = std::make_shared<SimArgs>();
    CLI::App* cmd = app.add_subcommand("sim", cat("One simulated run: seed and config first, verdict last (a seed "
                                                  "that draws the paged KV design runs kvweld-paged, as swarm does). ",
                                                  kVerdictExits));
    cmd->add_option("--seed", sim->seed, "the one seed that decides the run")->required()->check(seed_validator());
    add_run_options(cmd, sim->run);
    cmd->add_option("--trace", sim->trace, "write the run's trace (JSON Lines) here");
    cmd->add_option("--json", sim->json, "write the report as JSON here");
    cmd->add_flag("--no-oracles", sim->no_oracles, "run unchecked (measures the harness overhead)");
    cmd->add_flag("--timing", sim->timing, "print decodes per second to stderr");
    cmd->callback([sim, &action] { action = [sim] { return run_sim(*sim); }; });

    auto replay = std::make_shared<std::pair<std::string, std::string>>();
    CLI::App* rcmd = app.add_subcommand("replay", cat("Re-run a trace; prints the same report byte for byte. ",
                                                      kVerdictExits));
    rcmd->add_option("TRACE", replay->first, "trace file written by sim --trace or shrink")->required();
    rcmd->add_option("--json", replay->second, "write the report as JSON here");
    rcmd->callback([replay, &action] { action = [replay] { return run_replay(replay->first, replay->second); }; });

    auto shrink_args = std::make_shared<std::pair<std::string, std::string>>();
    CLI::App* scmd = app.add_subcommand("shrink", "Minimize a failing trace, keeping its failure class");
    scmd->add_option("TRACE", shrink_args->first, "a failing trace")->required();
    scmd->add_option("-o,--output", shrink_args->second, "where to write the minimized trace")->required();
    scmd->callback([shrink_args, &action] {
        action = [shrink_args] { return run_shrink(shrink_args->first, shrink_args->second); };
    });
}

}  // namespace kvweld::cli
