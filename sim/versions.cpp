#include "sim/versions.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "targets/registry.hpp"
#include "sim/report.hpp"
#include "sim/jsonl.hpp"
#include "sim/traffic.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <tuple>

namespace kvweld::sim {

namespace {

// The steady serving traffic of `kvweld traffic --mode steady` at one
// server shape (its other defaults; arrivals scaled with the slots, the
// same load per slot), once, in one KV layout; the reuse as the engine
// counts it, so that releases whose graphs split differently compare on
// the same terms.
TrafficParams steady_params(const VersionsOptions& o, int slots, int spec_k) {
    TrafficParams p;
    p.mode = TrafficMode::steady;
    p.ticks = o.traffic_ticks;
    p.prompt_mean = kSteadyPromptMean;
    p.output_mean = kSteadyOutputMean;
    p.slots = slots;
    p.spec_k = spec_k;
    p.arrival_rate = kSteadyArrivalRate * slots / TrafficParams{}.slots;
    return p;
}

SteadyReuse steady_reuse(const VersionsOptions& o, const std::string& engine, int slots, int spec_k, const char* layout) {
    SteadyReuse out;
    out.slots = slots, out.spec_k = spec_k, out.layout = layout;
    try {
        const TrafficResult r = run_traffic(steady_params(o, slots, spec_k), EngineChoice{engine, cat(layout, ",graph_reuse=1"), ""}, 16);
        out.ran = true;
        out.why_not = r.run.verdict == Verdict::pass ? "" : cat("the traffic ended ", to_string(r.run.verdict));
        out.calls = r.run.stats.calls, out.reused = r.run.stats.reused, out.shapes = r.shapes;
        out.judged = r.run.oracles.accounting;
        out.must_reuse = r.run.stats.must_reuse, out.may_reuse = r.run.stats.may_reuse;
        out.may_why = r.run.stats.may_reuse_why_text();
    } catch (const Error& e) {
        out.why_not = e.what();
    }
    return out;
}

// The kinds of op a shrunk trace holds, sorted and once each.
std::string op_kinds(const std::string& path) {
    std::set<std::string> kinds;
    for (const Op& op : parse_trace(read_text_file(path), path).ops) kinds.insert(std::string(to_string(op.kind())));
    std::string out;
    for (const std::string& k : kinds) out += cat(out.empty() ? "" : " ", k);
    return out;
}

// Every new failing seed shrunk (the first max_shrinks), grouped into kinds.
std::vector<NewFinding> shrink_new_findings(const VersionsOptions& o, const ReleaseRow& row) {
    std::vector<NewFinding> out;
    std::map<std::tuple<Verdict, Oracle, std::string, std::string>, std::size_t> kinds;
    int shrunk = 0;
    const auto dir = std::filesystem::path(o.traces_dir.empty() ? std::filesystem::temp_directory_path() / "kvweld-versions"
                                                                : std::filesystem::path(o.traces_dir)) / row.release;
    for (const RunResult& s : row.swarm.seeds) {
        if (s.verdict == Verdict::pass || !s.known_finding.empty() || o.shrink_runs <= 0 || shrunk++ >= o.max_shrinks)
            continue;
        const std::string path = (dir / cat("seed", s.config.seed, "-", to_string(s.verdict), ".jsonl")).string();
        const ShrunkTrace t = shrink_seed(s.config, o.steps, o.shrink_runs, path);
        const std::string ops = op_kinds(path);
        const Failure f = t.failure.value_or(Failure{});
        const auto [at, fresh] = kinds.try_emplace({t.verdict, f.oracle, f.clause, ops}, out.size());
        if (fresh) out.push_back({t, ops, {}});
        else std::filesystem::remove(path);  // one trace per kind is kept
        out[at->second].seeds.push_back(s.config.seed);
    }
    return out;
}

}  // namespace

std::string release_engine(const VersionsOptions& o, const std::string& release) {
    return release == o.pinned ? o.engine : cat(o.engine, "@", release);
}

std::vector<ReleaseRow> run_versions(const VersionsOptions& o, const std::function<void(const std::string&)>& line,
                                     const std::function<void(std::size_t, std::size_t)>& seeds) {
    const auto progress = [&](std::uint64_t first, std::uint64_t last) {
        return [&seeds, total = std::size_t(last - first) + 1](std::size_t done, std::size_t) {
            if (seeds) seeds(done, total);
        };
    };
    const auto say = [&](const std::string& text) {
        if (line) line(text);
    };
    std::vector<ReleaseRow> rows;
    for (std::size_t i = 0; i < o.releases.size(); ++i) {
        ReleaseRow row;
        row.release = o.releases[i];
        row.engine = release_engine(o, row.release);
        row.build = build_of(row.engine);
        row.rule_gap = targets::rule_gap(row.engine, row.build, "");
        const std::string where = cat(row.release, " (", i + 1, "/", o.releases.size(), ")");
        say(cat(where, ": swarm over seeds ", o.first, "..", o.last, ", twin on"));
        SwarmOptions swarm;
        swarm.first = o.first, swarm.last = o.last, swarm.jobs = o.jobs, swarm.steps = o.steps;
        swarm.engine = EngineChoice{row.engine, "", ""};
        swarm.engine.twin = true;
        row.swarm = run_swarm(swarm, progress(o.first, o.last));
        if (row.swarm.failures > row.swarm.known) say(cat(where, ": shrinking the new findings"));
        row.findings = shrink_new_findings(o, row);
        for (const auto& [slots, spec_k] : o.grid) {
            say(cat(where, ": steady traffic, ", slots, " slots x speculative k ", spec_k, ", ", o.traffic_ticks,
                    " ticks, each KV layout"));
            for (const char* layout : {"kv_unified=0", "kv_unified=1"})
                row.steady.push_back(steady_reuse(o, row.engine, slots, spec_k, layout));
        }
        row.separate = row.steady.at(0);
        row.unified = row.steady.at(1);
        if (i > 0) {
            say(cat(where, ": diff against ", o.releases[i - 1], " over seeds ", o.diff_first, "..", o.diff_last));
            DiffOptions d;
            d.swarm.first = o.diff_first, d.swarm.last = o.diff_last, d.swarm.jobs = o.jobs, d.swarm.steps = o.steps;
            d.swarm.engine = EngineChoice{rows.back().engine, "", ""};
            d.swarm.engine.peer = PeerChoice{row.engine, "", ""};
            d.traces_dir = o.traces_dir.empty() ? ""
                                                : (std::filesystem::path(o.traces_dir) /
                                                   cat("diff-", o.releases[i - 1], "-", row.release)).string();
            d.shrink_runs = o.shrink_runs;
            row.diff = run_diff(d, progress(o.diff_first, o.diff_last));
        }
        rows.push_back(std::move(row));
    }
    return rows;
}

bool versions_ok(const std::vector<ReleaseRow>& rows) {
    for (const ReleaseRow& r : rows)
        if (!r.swarm.ok()) return false;
    return true;
}

namespace {

std::string commit_of(const std::string& build) {
    const auto at = build.find("llama.cpp ");
    return at == std::string::npos ? "?" : build.substr(at + 10, 12);
}

std::string first_failure(const SwarmResult& s) {
    for (const RunResult& r : s.seeds)
        if (r.verdict != Verdict::pass && r.known_finding.empty())
            return cat("seed ", r.config.seed, ": ", to_string(r.verdict),
                       r.failure ? cat(" (", to_string(r.failure->oracle),
                                       r.failure->clause.empty() ? "" : cat(", ", r.failure->clause), ")")
                                 : "");
    return "-";
}

// "0.413 (0.413)": reuse per call, then the rule's ideal per call where the
// rule judged the run ("<" marks reuse below it, which the accounting
// oracle fails as spurious invalidation); "*": the traffic failed.
std::string steady_text(const SteadyReuse& s) {
    if (!s.ran) return "-";
    const std::string ideal =
        s.judged ? cat(" (", s.reused < s.must_reuse ? "<" : "", fixed(s.ideal_per_call(), 3), ")") : " (no rule)";
    return cat(fixed(s.per_call(), 3), ideal, s.why_not.empty() ? "" : "*");
}

std::string diff_text(const std::optional<DiffResult>& d) {
    if (!d) return "-";
    const RunStats& t = d->swarm.total;
    if (d->same()) return cat("same (", t.calls, " calls)");
    return cat(t.reuse_more, " / ", t.reuse_fewer, " / ", t.prepared_otherwise, " calls; ", d->rows_differ,
               " seeds rows differ", d->other ? cat(", ", d->other, " otherwise") : "");
}

// Steady reuse per call at every grid point, a column per release.
std::string grid_text(const std::vector<ReleaseRow>& rows) {
    if (rows.empty() || rows[0].steady.size() <= 2) return "";
    std::string out = "steady reuse per call across the server shapes (slots x speculative k; the engine's count, "
                      "then in parentheses the rule's ideal: the reuses it required per call):\n\n| shape | layout |";
    std::string rule = "|---|---|";
    for (const ReleaseRow& r : rows) out += cat(" ", r.release, " |"), rule += "---|";
    out += cat("\n", rule, "\n");
    for (std::size_t j = 0; j < rows[0].steady.size(); ++j) {
        const SteadyReuse& first = rows[0].steady[j];
        out += cat("| ", first.slots, " x ", first.spec_k, " | ", first.layout, " |");
        for (const ReleaseRow& r : rows) out += cat(" ", j < r.steady.size() ? steady_text(r.steady[j]) : "-", " |");
        out += "\n";
    }
    std::string why;  // the points where the rule allows more than it requires, and the clause
    for (const ReleaseRow& r : rows)
        for (const SteadyReuse& s : r.steady)
            if (s.ran && s.judged && !s.may_why.empty())
                why += cat("- ", r.release, ", ", s.slots, " x ", s.spec_k, ", ", s.layout, ": ", s.may_reuse,
                           " reuses allowed, not required: ", s.may_why, "\n");
    if (!why.empty()) out += cat("\nWhere the rule allows more reuse than it requires, the clause that could not require it:\n\n", why);
    return out + "\n";
}

// Batch shapes that one release reuses and the release after it never
// does (or the other way round), at any grid point: each with the traffic
// command that shows the one that never reuses (one_never_reuses).
std::string shape_changes(const std::vector<ReleaseRow>& rows, const VersionsOptions& o) {
    std::string out;
    for (std::size_t i = 1; i < rows.size(); ++i)
        for (std::size_t j = 0; j < rows[i].steady.size() && j < rows[i - 1].steady.size(); ++j) {
            const SteadyReuse &a = rows[i - 1].steady[j], &b = rows[i].steady[j];
            for (const auto& [shape, sa] : a.shapes) {
                const auto it = b.shapes.find(shape);
                if (it == b.shapes.end()) continue;
                const ShapeStats& sb = it->second;
                if (!one_never_reuses(sa.calls, sa.reused, sb.calls, sb.reused)) continue;
                const ReleaseRow& never = sa.reused > 0 ? rows[i] : rows[i - 1];
                out += cat(rows[i - 1].release, " -> ", rows[i].release, ", ", a.slots, " slots x k ", a.spec_k, ", ",
                           a.layout, ": batch shape ", shape, ": ", rows[i - 1].release, " reused ", sa.reused, " graphs in ",
                           sa.calls, " calls, ", rows[i].release, " ", sb.reused, " in ", sb.calls, "; ",
                           never.release, " never reuses it: ", steady_command(o, never.engine, sa.reused > 0 ? b : a), "\n");
            }
        }
    return out.empty() ? "" : cat("batch shapes one release reuses and the next never does (", kMinShapeCalls,
                                  " calls or more in each):\n", out, "\n");
}

}  // namespace

std::string steady_command(const VersionsOptions& o, const std::string& engine, const SteadyReuse& s) {
    const TrafficParams p = steady_params(o, s.slots, s.spec_k);
    return cat("kvweld traffic --engine ", engine, " --mode steady --slots ", s.slots, " --spec-k ", s.spec_k,
               " --arrival-rate ", p.arrival_rate, " --ticks ", p.ticks, " --params ", s.layout, ",graph_reuse=1");
}

std::string versions_table(const std::vector<ReleaseRow>& rows, const VersionsOptions& o) {
    std::string out = cat("releases of ", o.engine, ": swarm seeds ", o.first, "..", o.last, " (twin and reference on), ",
                          o.steps, " steps; diff seeds ", o.diff_first, "..", o.diff_last, "; steady traffic ",
                          o.traffic_ticks, " ticks\n\n");
    out += "| release | llama.cpp | rule | swarm verdict | seeds failed (known) | first new failure | steady reuse per call, "
           "kv_unified=0 / 1 | diff with the release before: calls the earlier reused more / fewer / otherwise |\n";
    out += "|---|---|---|---|---|---|---|---|\n";
    for (const ReleaseRow& r : rows) {
        const std::string verdict = !r.swarm.ok() ? "FAIL" : r.swarm.known ? "NO NEW FINDINGS" : "PASS";
        out += cat("| ", r.release, " | ", commit_of(r.build), " | ", r.rule_gap.empty() ? "applied" : "not applied", " | ",
                   verdict, " | ", r.swarm.failures, " (", r.swarm.known, ") | ", first_failure(r.swarm), " | ",
                   steady_text(r.separate), " / ", steady_text(r.unified), " | ", diff_text(r.diff), " |\n");
    }
    out += "\n" + grid_text(rows) + shape_changes(rows, o);
    for (const ReleaseRow& r : rows) {
        for (const SteadyReuse& s : r.steady)
            if (!s.why_not.empty())
                out += cat(r.release, ": steady traffic ", s.slots, " x ", s.spec_k, " ", s.layout, ": ", s.why_not, "\n");
        for (const NewFinding& f : r.findings) {
            const ShrunkTrace& t = f.first;
            std::string seeds;
            for (std::size_t i = 0; i < f.seeds.size() && i < 8; ++i) seeds += cat(i ? " " : "", f.seeds[i]);
            out += cat(r.release, " new finding, ", f.seeds.size(), " seeds (", seeds, f.seeds.size() > 8 ? " ..." : "",
                       "), ", to_string(t.verdict), t.failure ? cat(", ", to_string(t.failure->oracle), " oracle") : "",
                       ", shrunk ops: ", f.ops, "; seed ", t.seed, ": ", t.ops_before, " ops -> ", t.ops_after,
                       t.path.empty() ? "" : cat(", kvweld replay ", t.path), t.failure ? cat("\n  ", t.failure->detail) : "",
                       "\n");
        }
        if (r.diff)
            for (const ShrunkTrace& t : r.diff->shrunk)
                out += cat(r.release, " diff with the release before, seed ", t.seed, " (", to_string(t.verdict), "): ",
                           t.ops_before, " ops -> ", t.ops_after, t.path.empty() ? "" : cat(", kvweld replay ", t.path),
                           t.failure ? cat("\n  ", t.failure->detail) : "", "\n");
    }
    return out + cat("versions verdict: ", versions_ok(rows) ? "no new findings" : "NEW FINDINGS", "\n");
}

}  // namespace kvweld::sim
