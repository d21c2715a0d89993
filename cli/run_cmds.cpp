// `kvweld sim|swarm|merge|replay|shrink|mutants`: the simulator over the
// engine --engine names (kvweld's own in process by default).
#include "cli/commands.hpp"

#include "sim/known_findings.hpp"

#include "sim/report.hpp"
#include "engine/decode_session.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"
#include "sim/json_report.hpp"
#include "sim/mutants.hpp"
#include "sim/run.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unistd.h>

namespace kvweld::cli {

using namespace kvweld::sim;

void print(const std::string& s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    require(out.good(), path, ": cannot open for writing");
    out << text;
    require(out.good(), path, ": write failed");
}

EngineChoice engine_choice(const RunOptions& o) {
    EngineChoice e{o.engine, o.params, "", o.seqs, o.n_ctx, o.twin};
    require_engine(e.engine);  // a bad name or path is an Error now, before anything runs
    e.isolation.isolate = o.isolate == "yes" ? Isolate::yes : o.isolate == "no" ? Isolate::no : Isolate::engine_default;
    e.isolation.call_timeout_ms = int(o.call_timeout * 1000);
    require(e.isolation.isolate != Isolate::yes || !engine_in_process(e.engine), "--isolate yes with --engine ",
            e.engine, ": it runs in kvweld's process (its white box); isolation needs an engine behind the ABI");
    const Backend backend = backend_from_string(o.backend);
    if (backend != Backend::cpu) {  // in process, the engine's backend setting
        require(engine_in_process(e.engine), "--backend ", o.backend, " with --engine ", e.engine,
                ": an engine behind the ABI picks its own (kvweld-paged: --params backend=cuda)");
        std::string why;
        require(cuda_backend_available(&why), "CUDA backend unavailable: ", why);
        e.params += cat(e.params.empty() ? "" : ",", "backend=", o.backend);
    }
    const std::string listed = engine_fault_list(e.engine);
    for (const std::string& f : o.faults) {
        require(abi::lists_fault(listed.c_str(), f), "unknown fault '", f, "': engine ", e.engine, "'s faults are ",
                listed.empty() ? "(none: a build without KVWELD_FAULTS has no fault switches)" : listed);
        e.faults.append(e.faults.empty() ? "" : ",").append(f);
    }
    return e;
}

namespace {

// A run's failure that is a known finding of the engine says so (the exit
// code stays the failure's: a known bug is still a bug).
void print_known(const RunResult& r, const std::string& choice) {
    const KnownFindings known = known_findings_for(r.config.engine.engine, choice);
    if (const KnownFinding* f = known.match(r))
        std::printf("known finding '%s' (%s): %s\n  traced to: %s\n", f->id.c_str(), known.path.c_str(),
                    f->explanation.c_str(), f->source.c_str());
}

}  // namespace

int run_sim(const RunOptions& o, std::uint64_t seed, const std::string& trace, const std::string& json,
                   const Checking& checking) {
    if (is_server_engine(o)) return run_server_sim(o, seed, trace);
    const EngineChoice engine = engine_choice(o);
    SimConfig config = draw_config(seed, engine, o.model, choice_capabilities(engine));
    // The findings outlive the loop: steers_named points into them (a
    // temporary here was freed before the loop read its steers).
    const KnownFindings known = o.steer.empty() ? KnownFindings{} : known_findings_for(engine.engine, o.known_findings);
    if (!o.steer.empty())
        for (const KnownFinding* f : steers_named(known, o.steer)) config = steered(config, *f);
    const auto start = std::chrono::steady_clock::now();
    RunResult r = run_generated(config, o.steps, !checking.no_oracles);
    if (!o.steer.empty()) r.steered_past = abi::split_list(o.steer.c_str());  // its reproduce line names them
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (checking.timing)
        std::fprintf(stderr, "timing: %llu rows in %.3f s = %.0f rows/s (oracles %s)\n",
                     (unsigned long long)r.stats.rows, secs, double(r.stats.rows) / secs,
                     checking.no_oracles ? "off" : "on");
    print(text_report(r));
    print_known(r, o.known_findings);
    if (!trace.empty()) write_text(trace, trace_text(r));
    if (!json.empty()) write_json(json, json_report(r));
    return exit_code(r.verdict);
}

int run_swarm(const RunOptions& o, const SeedShard& seeds, int jobs, const std::string& json, SwarmGates gates) {
    const auto [first, last] = shard_range(seeds.range_first, seeds.range_last, seeds.shard);
    if (is_server_engine(o)) return run_server_swarm(o, first, last, jobs, gates);
    SwarmOptions s;
    s.first = first;
    s.last = last;
    s.jobs = jobs;
    s.steps = o.steps;
    s.engine = engine_choice(o);
    s.model = o.model;
    s.known_findings = o.known_findings;
    s.require_terms = gates.terms;
    s.require_coverage = gates.coverage;
    s.steer = !o.no_steer;
    const std::size_t total = std::size_t(last - first) + 1;
    std::printf("swarm: seeds %llu..%llu (%zu), %d steps each, %d jobs, engine %s%s%s\n", (unsigned long long)first,
                (unsigned long long)last, total, s.steps, jobs, s.engine.engine.c_str(),
                s.engine.params.empty() ? "" : cat(" (", s.engine.params, ")").c_str(),
                s.engine.faults.empty() ? "" : cat(", faults ", s.engine.faults).c_str());
    std::fflush(stdout);
    const bool tty = isatty(STDERR_FILENO);
    const auto start = std::chrono::steady_clock::now();
    const SwarmResult r = run_swarm(s, [&](std::size_t done, std::size_t failures) {
        if (!tty) return;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "\r[swarm] %zu/%zu seeds  %.1f seeds/s  %zu failures   ", done, total,
                     double(done) / std::max(secs, 1e-9), failures);
    });
    if (tty) std::fprintf(stderr, "\n");
    print(swarm_table(r, s));
    if (!json.empty()) write_json(json, swarm_json(r, s, seeds.range_first, seeds.range_last, seeds.shard));
    return r.ok() ? 0 : 1;
}

int run_merge(const std::vector<std::pair<std::string, nlohmann::json>>& reports, const std::string& json) {
    const Merged m = merge_reports(reports);
    std::printf("merge: %zu shard reports, seeds %llu..%llu\n", reports.size(), (unsigned long long)m.options.first,
                (unsigned long long)m.options.last);
    print(swarm_table(m.result, m.options));
    if (!json.empty()) write_json(json, m.report);
    return m.result.ok() ? 0 : 1;
}

int run_replay(const std::string& text, const std::string& path, const std::string& json) {
    const Trace t = parse_trace(text, path);
    const RunResult r = run_ops(t.config, t.ops, t.steps);
    print(text_report(r));
    print_known(r, "");
    if (!json.empty()) write_json(json, json_report(r));
    return exit_code(r.verdict);
}

int run_shrink(const std::string& text, const std::string& path, const std::string& out, ShrinkKeep keep) {
    const Trace t = parse_trace(text, path);
    const RunResult original = run_ops(t.config, t.ops, t.steps);
    require(original.verdict != Verdict::pass, "shrink: ", path, " passes; there is nothing to shrink");
    const FailureIdentity id = identity_of(original.verdict, original.failure ? &*original.failure : nullptr);
    std::printf("shrink: %s fails with %s after %zu ops on engine %s; minimizing, keeping %s...\n", path.c_str(),
                std::string(to_string(original.verdict)).c_str(), original.ops.size(), t.config.engine.engine.c_str(),
                keep == ShrinkKeep::identity ? cat("its identity (", to_string(id), ")").c_str() : "its verdict only");
    std::fflush(stdout);
    const ShrinkResult s = shrink(t.config, original.ops, t.steps, original.verdict, 2000, keep);
    write_text(out, trace_text(s.result));
    print_shrink_summary(original.ops.size(), s.ops.size(), s.runs, s.result.verdict, s.result.failure, out);
    return 0;
}

int run_mutants(const RunOptions& o, std::uint64_t seeds, int jobs, const std::string& json, bool until_killed) {
    MutantsOptions m;
    m.seeds = seeds;
    m.steps = o.steps;
    m.jobs = jobs;
    RunOptions no_faults = o;
    no_faults.faults.clear();
    m.engine = engine_choice(no_faults);
    m.model = o.model;
    m.faults = o.faults;
    m.known_findings = o.known_findings;
    m.until_killed = until_killed;
    const MutantsResult r =
        run_mutants(m, [](const std::string& line) { std::fprintf(stderr, "[mutants] %s\n", line.c_str()); });
    print(mutants_table(r, m));
    if (!json.empty()) write_json(json, mutants_json(r, m));
    return r.ok() ? 0 : 1;
}

}  // namespace kvweld::cli
