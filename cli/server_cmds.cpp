// --engine llama-server: sim, swarm, replay and shrink over the server
// simulator (sim/server/server_run.hpp). Exit 0 pass, 1 a failure (an
// oracle's, or a server that died, answered 5xx or hung), 2 bad input or a
// server that could not start.
#include "cli/commands.hpp"

#include "sim/server/server_known.hpp"
#include "sim/server/server_run.hpp"
#include "targets/registry.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

namespace kvweld::cli {

namespace {

using namespace kvweld::sim::server;

// --server, or else the engine's row's binary in the cache (the pinned
// build's, which scripts/setup builds, or llama-server@R's).
std::string need_server(const std::string& server, const std::string& engine = "llama-server") {
    if (!server.empty()) {
        require(std::filesystem::exists(server), "--server ", server, ": no such file");
        return server;
    }
    const std::string cached = targets::server_binary(engine);
    std::fprintf(stderr, "llama-server: %s (%s; --server PATH runs another)\n", cached.c_str(),
                 targets::named_release(engine).empty() ? "the cache's pinned build" : cat("the cache's ", engine).c_str());
    return cached;
}

// llama-server@R+fixes: the known findings without a fix, unless the run names a file.
std::string known_for(const RunOptions& o) {
    return o.known_findings.empty() && targets::named_release(o.engine).ends_with("+fixes") ? "fixed" : o.known_findings;
}

std::string work_dir(const std::string& given, const char* what) {
    return given.empty() ? (std::filesystem::temp_directory_path() / cat("kvweld-", what, "-", ::getpid())).string() : given;
}

std::string preset(const RunOptions& o) { return o.model.empty() ? "small" : o.model; }

// --params arch=NAME: the model's architecture (llama without it), the
// one setting a server run takes; the rest are drawn per seed.
std::string arch(const RunOptions& o) {
    if (o.params.empty()) return "llama";
    require(o.params.starts_with("arch=") && o.params.find(',') == std::string::npos, "--params '", o.params,
            "': --engine llama-server takes one setting, arch=NAME (", arch_names(), "); the others are drawn per seed");
    const std::string name = o.params.substr(5);
    (void)is_drawn("arch", name);  // names the archs where it is none of them
    return name;
}

ServerRunConfig config_for(const RunOptions& o, std::uint64_t seed, const std::string& dir) {
    ServerRunConfig c = server_config(need_server(o.server, o.engine), preset(o), arch(o), seed, dir);
    c.request_timeout_s = o.call_timeout;
    return c;
}

int exit_code(ServerVerdict v) { return v == ServerVerdict::pass ? 0 : 1; }

// The flags that only the library's engines take.
void refuse_library_flags(const RunOptions& o) {
    require(o.faults.empty() && !o.twin && o.seqs == 0 && o.n_ctx == 0,
            "--engine llama-server takes --server, --model, --params arch=NAME, --steps and --work-dir; --fault, --twin, "
            "--seqs and --n-ctx are the library engines' (a server's settings are drawn per seed)");
    (void)arch(o);
}

}  // namespace

bool is_server_engine(const RunOptions& o) { return targets::engine_is_server(o.engine); }

int run_server_sim(const RunOptions& o, std::uint64_t seed, const std::string& trace) {
    refuse_library_flags(o);
    const std::string dir = work_dir(o.work_dir, "server-sim");
    const ServerRunResult r = run_server_generated(config_for(o, seed, dir), o.steps);
    print(server_report(r));
    if (!trace.empty()) write_text(trace, server_trace_text(r));
    std::printf("the server's log: %s\n", r.log.c_str());
    return exit_code(r.verdict);
}

int run_server_swarm(const RunOptions& o, std::uint64_t first, std::uint64_t last, int jobs, const SwarmGates& gates) {
    refuse_library_flags(o);
    ServerSwarmOptions s;
    s.server = need_server(o.server, o.engine), s.preset = preset(o), s.first = first, s.last = last, s.steps = o.steps, s.jobs = jobs;
    s.arch = arch(o);
    s.work_dir = work_dir(o.work_dir, "server-swarm");
    s.known_findings = known_for(o);
    s.request_timeout_s = o.call_timeout;
    s.steer = !o.no_steer;
    s.require_terms = gates.terms;
    require(!gates.coverage, "--require-coverage gates the library engines' swarm; the server swarm's gate is --require-terms "
                             "(every op variant sent and every settings field drawn with a second value)");
    const std::size_t total = std::size_t(last - first) + 1;
    std::printf("swarm: seeds %llu..%llu (%zu), %d ops each, %d jobs, engine llama-server %s, arch %s (a server per seed on "
                "127.0.0.1, and its ground truth); failing seeds' traces and logs under %s\n",
                (unsigned long long)first, (unsigned long long)last, total, s.steps, jobs, s.server.c_str(), s.arch.c_str(),
                s.work_dir.c_str());
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    const ServerSwarmResult r = run_server_swarm(s, [&](std::size_t done, std::size_t failures) {
        if (done % 25 != 0 && done != total) return;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "[swarm] %zu/%zu seeds  %.2f seeds/s  %zu failures\n", done, total, double(done) / std::max(secs, 1e-9),
                     failures);
    });
    print(server_swarm_table(r, s));
    if (r.ok() && o.work_dir.empty()) std::filesystem::remove_all(s.work_dir);
    return r.ok() ? 0 : 1;
}

int run_server_replay(const std::string& text, const std::string& path, const std::string& server, const std::string& dir) {
    const ServerTrace t = parse_server_trace(text, path);
    ServerRunConfig c = t.config;
    c.server = need_server(server), c.work_dir = work_dir(dir, "server-replay");
    const ServerRunResult r = run_server_ops(c, t.ops, t.observed);
    print(server_report(r));
    std::printf("the server's log: %s\n", r.log.c_str());
    return exit_code(r.verdict);
}

int run_server_shrink(const std::string& text, const std::string& path, const std::string& server, const std::string& out,
                      const std::string& dir, bool keep_identity) {
    const ServerTrace t = parse_server_trace(text, path);
    ServerRunConfig c = t.config;
    c.server = need_server(server), c.work_dir = work_dir(dir, "server-shrink");
    // Identity: the known finding of the pinned release the failure is (or none), kept through the shrink.
    const ServerKnownFindings known = server_known_findings_for("");
    const ServerRunResult first = run_server_ops(c, t.ops);
    const ServerKnownFinding* is = known.match(first);
    const std::string which = is ? cat("known finding ", is->id) : "no known finding";
    std::printf("shrink: %s (%zu ops) on llama-server %s; minimizing, keeping the verdict, the oracle%s...\n", path.c_str(),
                t.ops.size(), c.server.c_str(), keep_identity ? cat(" and what it is (", which, ")").c_str() : "");
    std::fflush(stdout);
    std::function<bool(const ServerRunResult&)> same;
    if (keep_identity) same = [&](const ServerRunResult& r) { return known.match(r) == is; };
    const ServerShrinkResult s = shrink_server(c, t.ops, 400, [](int runs) {
        if (runs % 10 == 0) std::fprintf(stderr, "[shrink] %d runs\n", runs);
    }, same);
    write_text(out, server_trace_text(s.result));
    std::printf("shrink: %zu ops -> %zu ops in %d runs, still %s (%s)\n%s", s.before, s.result.ops.size(), s.runs,
                std::string(to_string(s.result.verdict)).c_str(), s.result.failure->oracle.c_str(),
                server_report(s.result).c_str());
    std::printf("reproduce: kvweld replay --server %s %s\n", c.server.c_str(), out.c_str());
    return 0;
}

}  // namespace kvweld::cli
