// `kvweld sim|swarm|replay|shrink|mutants --engine E`: the serving
// simulator (sim/serve/) over an engine behind the plugin ABI.
#include "cli/commands.hpp"

#include "sim/report.hpp"
#include "engines/registry.hpp"
#include "sim/serve/serve_json.hpp"
#include "sim/serve/serve_mutants.hpp"
#include "sim/serve/serve_run.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace kvweld::cli {

using namespace kvweld::sim;

namespace {

void print(const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    require(out.good(), "trace ", path, ": cannot open for writing");
    out << text;
    require(out.good(), "trace ", path, ": write failed");
}

}  // namespace

EngineChoice engine_choice(const RunOptions& o) {
    require(o.backend == "cpu", "--backend ", o.backend, " with --engine: an engine behind the ABI picks its own");
    EngineChoice e{o.engine, o.params, "", o.seqs, o.n_ctx};
    for (const std::string& f : o.faults) e.faults += (e.faults.empty() ? "" : ",") + f;
    engine_plugin_path(e.engine);  // a bad name or path is an Error now, before anything runs
    return e;
}

int run_engine_sim(const RunOptions& o, std::uint64_t seed, const std::string& trace, const std::string& json,
                   const Checking& checking) {
    const EngineChoice engine = engine_choice(o);
    const ServeConfig config =
        draw_serve_config(seed, engine, o.model, engine_library(engine.engine)->api().capabilities);
    const auto start = std::chrono::steady_clock::now();
    const ServeResult r = run_serve_generated(config, o.steps, !checking.no_oracles);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (checking.timing)
        std::fprintf(stderr, "timing: %llu rows in %.3f s = %.0f rows/s (oracles %s)\n",
                     (unsigned long long)r.stats.rows, secs, double(r.stats.rows) / secs,
                     checking.no_oracles ? "off" : "on");
    print(serve_report(r));
    if (!trace.empty()) write_text(trace, serve_trace_text(r));
    if (!json.empty()) write_json(json, serve_json(r));
    return exit_code(r.verdict);
}

int run_engine_swarm(const RunOptions& o, const SeedShard& seeds, int jobs, const std::string& json) {
    const auto [first, last] = shard_range(seeds.range_first, seeds.range_last, seeds.shard);
    ServeSwarmOptions s;
    s.first = first;
    s.last = last;
    s.jobs = jobs;
    s.steps = o.steps;
    s.engine = engine_choice(o);
    s.model = o.model;
    const std::size_t total = std::size_t(last - first) + 1;
    std::printf("swarm: seeds %llu..%llu (%zu), %d steps each, %d jobs, engine %s%s%s\n", (unsigned long long)first,
                (unsigned long long)last, total, s.steps, jobs, s.engine.engine.c_str(),
                s.engine.params.empty() ? "" : cat(" (", s.engine.params, ")").c_str(),
                s.engine.faults.empty() ? "" : cat(", faults ", s.engine.faults).c_str());
    std::fflush(stdout);
    const bool tty = isatty(STDERR_FILENO);
    const auto start = std::chrono::steady_clock::now();
    const ServeSwarmResult r = run_serve_swarm(s, [&](std::size_t done, std::size_t failures) {
        if (!tty) return;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "\r[swarm] %zu/%zu seeds  %.1f seeds/s  %zu failures   ", done, total,
                     double(done) / std::max(secs, 1e-9), failures);
    });
    if (tty) std::fprintf(stderr, "\n");
    print(serve_swarm_table(r, s));
    if (!json.empty()) write_json(json, serve_swarm_json(r, s, seeds.range_first, seeds.range_last, seeds.shard));
    return r.failures == 0 ? 0 : 1;
}

int run_engine_merge(const std::vector<std::pair<std::string, nlohmann::json>>& reports, const std::string& json) {
    const ServeMerged m = merge_serve_reports(reports);
    std::printf("merge: %zu shard reports, seeds %llu..%llu\n", reports.size(), (unsigned long long)m.options.first,
                (unsigned long long)m.options.last);
    print(serve_swarm_table(m.result, m.options));
    if (!json.empty()) write_json(json, m.report);
    return m.result.failures == 0 ? 0 : 1;
}

int run_engine_replay(const std::string& text, const std::string& path, const std::string& json) {
    const ServeTrace t = parse_serve_trace(text, path);
    const ServeResult r = run_serve_ops(t.config, t.ops, t.steps);
    print(serve_report(r));
    if (!json.empty()) write_json(json, serve_json(r));
    return exit_code(r.verdict);
}

int run_engine_shrink(const std::string& text, const std::string& path, const std::string& out) {
    const ServeTrace t = parse_serve_trace(text, path);
    const ServeResult original = run_serve_ops(t.config, t.ops, t.steps);
    require(original.verdict != Verdict::pass, "shrink: ", path, " passes; there is nothing to shrink");
    std::printf("shrink: %s fails with %s after %zu ops on engine %s; minimizing...\n", path.c_str(),
                std::string(to_string(original.verdict)).c_str(), original.ops.size(), t.config.engine.engine.c_str());
    std::fflush(stdout);
    const ServeShrinkResult s = shrink_serve(t.config, original.ops, t.steps, original.verdict);
    write_text(out, serve_trace_text(s.result));
    print_shrink_summary(original.ops.size(), s.ops.size(), s.runs, s.result.verdict, s.result.failure, out);
    return 0;
}

int run_engine_mutants(const RunOptions& o, std::uint64_t seeds, int jobs, const std::string& json) {
    ServeMutantsOptions m;
    m.seeds = seeds;
    m.steps = o.steps;
    m.jobs = jobs;
    RunOptions no_faults = o;
    no_faults.faults.clear();
    m.engine = engine_choice(no_faults);
    m.model = o.model;
    m.faults = o.faults;
    const ServeMutantsResult r =
        run_serve_mutants(m, [](const std::string& line) { std::fprintf(stderr, "[mutants] %s\n", line.c_str()); });
    print(serve_mutants_table(r, m));
    if (!json.empty()) write_json(json, serve_mutants_json(r, m));
    return r.ok() ? 0 : 1;
}

}  // namespace kvweld::cli
