#include "sim/diff.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "targets/registry.hpp"
#include "sim/observers.hpp"
#include "sim/report.hpp"

#include <filesystem>
#include <set>

namespace kvweld::sim {

namespace {

std::string build_name(const std::string& engine) {
    const std::string build = build_of(engine);
    return build.empty() ? engine : cat(engine, " (", build, ")");
}

// What makes two differing seeds one kind: how the run ended, at which
// kind of op, and for calls prepared differently which engine reused more.
std::string difference_kind(const RunResult& s) {
    std::string kind = cat(to_string(s.verdict), " ", s.failure ? s.failure->op : "");
    if (!s.reuse_diffs.empty()) kind += s.reuse_diffs.front().engine.reused > s.reuse_diffs.front().peer.reused ? " A" : " B";
    return kind;
}

// Classes of batch shape one engine reuses in and the other never does,
// over every seed: each with the seed that ran it most, and its command.
std::string shape_changes(const DiffResult& r, const DiffOptions& o) {
    std::string out;
    for (const auto& [shape, p] : r.swarm.total.peer_shapes) {
        if (!one_never_reuses(p.calls, p.reused, p.calls, p.peer_reused)) continue;
        const RunResult* most = nullptr;
        std::uint64_t most_calls = 0;
        for (const RunResult& seed : r.swarm.seeds)
            if (const auto it = seed.stats.peer_shapes.find(shape);
                it != seed.stats.peer_shapes.end() && it->second.calls > most_calls)
                most = &seed, most_calls = it->second.calls;
        out += cat("  ", shape, ": A reused ", p.reused, " graphs in ", p.calls, " calls, B ", p.peer_reused, "; ",
                   p.reused > 0 ? "B" : "A", " never reuses it; most calls (", most_calls, ") in seed ",
                   most->config.seed, ": ", reproduce_command(most->config, o.swarm.steps), "\n");
    }
    return out.empty() ? "" : cat("batch shapes one engine reuses and the other never does (", kMinShapeCalls,
                                  " calls or more):\n", out);
}

}  // namespace

DiffResult run_diff(const DiffOptions& o, const std::function<void(std::size_t, std::size_t)>& progress,
                    const std::function<void(const std::string&)>& note) {
    require(o.swarm.engine.peer.has_value(), "diff: no second engine given");
    SwarmOptions swarm = o.swarm;
    swarm.known_findings = "none";  // a difference is a difference, whoever's bug it is
    DiffResult out;
    out.swarm = run_swarm(swarm, progress);
    std::set<std::string> shrunk;
    for (const RunResult& s : out.swarm.seeds) {
        out.rows_differ += s.verdict == Verdict::rows_differ;
        out.reuse_differs += s.verdict == Verdict::reuse_differs;
        out.other += s.verdict != Verdict::pass && s.verdict != Verdict::rows_differ && s.verdict != Verdict::reuse_differs;
        out.both_refused += s.verdict == Verdict::pass && !s.ended_early.empty();
        if (s.verdict == Verdict::pass || o.shrink_runs <= 0 || shrunk.size() >= std::size_t(o.max_shrinks) ||
            !shrunk.insert(difference_kind(s)).second)
            continue;
        if (note) note(cat("shrinking seed ", s.config.seed, " (", to_string(s.verdict), "), at most ", o.shrink_runs, " runs"));
        const std::string path = o.traces_dir.empty() ? "" : (std::filesystem::path(o.traces_dir) /
                                 cat("diff-seed", s.config.seed, "-", to_string(s.verdict), ".jsonl")).string();
        out.shrunk.push_back(shrink_seed(s.config, o.swarm.steps, o.shrink_runs, path));
    }
    return out;
}

std::string diff_table(const DiffResult& r, const DiffOptions& o) {
    const EngineChoice& e = o.swarm.engine;
    std::string out = cat("diff over seeds ", o.swarm.first, "..", o.swarm.last, ":\n  engine A: ", build_name(e.engine),
                          "\n  engine B: ", build_name(e.peer->engine), "\n", r.swarm.oracles.describe(), "\n");
    out += table_row("seeds", cat(r.swarm.seeds.size(), " (", r.rows_differ, " with rows that differ, ", r.reuse_differs,
                                  " with calls prepared differently only, ", r.other, " that ended otherwise; ",
                                  r.both_refused, " stopped early, alike: both engines refused the same call)"));
    const RunStats& s = r.swarm.total;
    out += table_row("engine calls (row tolerance)", cat(s.calls, " (", e.peer->tolerance, ")"));
    out += peer_rows(s, r.swarm.oracles);
    out += shape_changes(r, o);
    for (const RunResult& seed : r.swarm.seeds) {
        if (seed.verdict == Verdict::pass) continue;
        out += cat(seed.verdict == Verdict::reuse_differs ? "REUSE" : seed.verdict == Verdict::rows_differ ? "ROWS" : "FAIL",
                   " seed ", seed.config.seed, ": ", to_string(seed.verdict), " at op ",
                   seed.failure ? seed.failure->op_index : 0, ": ", seed.failure ? seed.failure->detail : "", "\n");
        out += reuse_diff_lines(seed, 3);
        out += cat("  reproduce: ", reproduce_command(seed.config, o.swarm.steps), "\n");
    }
    std::size_t early = 0;
    for (const RunResult& seed : r.swarm.seeds)
        if (seed.verdict == Verdict::pass && !seed.ended_early.empty() && early++ < 3)
            out += cat("ALIKE seed ", seed.config.seed, ": ", seed.ended_early, "\n");
    if (early > 3) out += cat("  ... ", early - 3, " more seeds stopped early alike\n");
    for (const ShrunkTrace& t : r.shrunk)
        out += cat("shrunk seed ", t.seed, " (", to_string(t.verdict), "): ", t.ops_before, " ops -> ", t.ops_after,
                   t.path.empty() ? "" : cat(": kvweld replay ", t.path),
                   t.failure ? cat("\n  ", t.failure->detail) : "", "\n");
    if (r.same())
        return out + cat("diff verdict: SAME (every row within ", e.peer->tolerance,
                         r.swarm.oracles.peer_reuse_why_not.empty() ? ", every call prepared alike" : "", ")\n");
    return out + cat("diff verdict: DIFFERENT (", r.swarm.failures, " of ", r.swarm.seeds.size(), " seeds)\n");
}

}  // namespace kvweld::sim
