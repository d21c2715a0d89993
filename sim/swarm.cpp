// The swarm: seeds in parallel, known findings matched and steered past,
// and its table (sim/run.hpp).
#include "sim/run.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/ddmin.hpp"
#include "sim/op_table.hpp"
#include "sim/jsonl.hpp"
#include "sim/known_findings.hpp"
#include "sim/report.hpp"
#include "sim/seed_pool.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

namespace kvweld::sim {

namespace {

// One seed's run; an engine that cannot be created for its config is the
// seed's engine error.
RunResult run_seed(const SimConfig& config, int steps) {
    RunResult r;
    try {
        r = run_generated(config, steps);
    } catch (const Error& e) {  // a crash while it was made carries its title
        const auto* crashed = dynamic_cast<const targets::Crashed*>(&e);
        r = RunResult{config, steps, {}, {}, {}, Verdict::engine_error,
                      Failure{0, "create", Oracle::engine, e.what(), crashed ? crashed->clause() : ""}};
    }
    r.ops.clear();
    return r;
}

// A seed that met a known finding with a steer runs again around it, the
// runs' stats added up, until it passes, fails otherwise, or meets a
// finding it was already steered past (or without a steer).
// A steer that would set a setting the user fixed (--params) is not taken:
// the swarm runs what it was asked to.
bool user_fixed(const KnownFinding& f, const std::string& user_params) {
    for (const std::string& kv : abi::split_list(f.steer_params.c_str()))
        for (const std::string& fixed : abi::split_list(user_params.c_str()))
            if (kv.substr(0, kv.find('=')) == fixed.substr(0, fixed.find('='))) return true;
    return false;
}

void steer_past_known(RunResult& r, const KnownFindings& known, int steps, const std::string& user_params) {
    RunStats judged;
    std::vector<std::string> past;
    SimConfig config = r.config;
    for (int n = 0; n < kMaxSteers; ++n) {
        const KnownFinding* f = known.match(r);
        if (!f || !f->steerable() || user_fixed(*f, user_params) ||
            std::find(past.begin(), past.end(), f->id) != past.end())
            break;
        past.push_back(f->id);
        judged.add(r.stats);
        config = steered(config, *f);
        r = run_seed(config, steps);
    }
    r.stats.add(judged);
    r.steered_past = std::move(past);
}

// What the swarm never reached that it could have: kinds weighted in some
// seed that never ran, variants of a kind that ran that never took effect,
// known findings no seed met (steered past counts as met).
std::vector<std::string> coverage_gaps(const SwarmResult& out, const KnownFindings& known, const std::string& params) {
    std::vector<std::string> gaps;
    for (int k = 0; k < kOpKinds; ++k) {
        const OpKind kind = OpKind(k);
        const auto weighted = std::count_if(out.seeds.begin(), out.seeds.end(),
                                            [&](const RunResult& s) { return s.config.weights[std::size_t(k)] > 0; });
        const std::uint64_t ran = out.total.ops_by_kind[std::size_t(k)];
        if (weighted && !ran) gaps.push_back(cat("op kind ", to_string(kind), " never ran (weighted in ", weighted, " seeds)"));
        if (!ran) continue;
        for (std::string_view v : op_variants(kind)) {
            const std::string name = cat(to_string(kind), ".", v);
            if (!out.total.variants.count(name))
                gaps.push_back(cat("op variant ", name, " never took effect (", to_string(kind), " ran ", ran, " times)"));
        }
    }
    for (const KnownFinding& f : known.findings) {
        if (!f.reachable(params)) continue;  // its setting is not the swarm's
        const bool met = std::any_of(out.seeds.begin(), out.seeds.end(), [&](const RunResult& s) {
            return s.known_finding == f.id || std::count(s.steered_past.begin(), s.steered_past.end(), f.id);
        });
        if (!met) gaps.push_back(cat("known finding ", f.id, " never met"));
    }
    return gaps;
}

// Where seed `s` met finding `id`: the findings it was steered past before
// it (its replay steers past them), or nullopt where it did not meet it.
std::optional<std::vector<std::string>> steers_before(const RunResult& s, const std::string& id) {
    const auto it = std::find(s.steered_past.begin(), s.steered_past.end(), id);
    if (it != s.steered_past.end()) return std::vector<std::string>(s.steered_past.begin(), it);
    if (s.known_finding == id) return s.steered_past;
    return std::nullopt;
}

std::vector<FindingMet> findings_met(const std::vector<RunResult>& seeds, const KnownFindings& known, int steps) {
    std::vector<FindingMet> out;
    for (const KnownFinding& f : known.findings) {
        FindingMet m{f.id, {}, {}, f.trace, f.program, f.sheet, f.upstream ? f.upstream->summary() : ""};
        for (const RunResult& s : seeds) {
            const auto steers = steers_before(s, f.id);
            if (!steers) continue;
            if (m.seeds.empty())
                m.replay = cat(reproduce_command(s.config, steps),
                               steers->empty() ? "" : cat(" --steer ", join_list(*steers, ",")));
            m.seeds.push_back(s.config.seed);
        }
        if (!m.seeds.empty()) out.push_back(std::move(m));
    }
    return out;
}

}  // namespace

SwarmResult run_swarm(const SwarmOptions& o,
                                 const std::function<void(std::size_t, std::size_t)>& progress) {
    const std::size_t n = std::size_t(o.last - o.first) + 1;
    const std::uint32_t capabilities = choice_capabilities(o.engine);
    // A bad setting or fault name is the user's input, refused (Error) before
    // any seed runs, not reported as an engine error on every seed.
    { const Simulator probe(draw_config(o.first, o.engine, o.model, capabilities)); }
    const KnownFindings known = known_findings_for(o.engine.engine, o.known_findings);
    SwarmResult out;
    out.known_path = known.path;
    out.seeds.resize(n);
    std::atomic<std::size_t> stop{n};  // the first seed (index) with a new failure, under stop_at_new_failure
    run_indexed(
        n, o.jobs,
        [&](std::size_t i) {
            if (i > stop.load()) return false;
            out.seeds[i] = run_seed(draw_config(o.first + i, o.engine, o.model, capabilities), o.steps);
            if (o.steer) steer_past_known(out.seeds[i], known, o.steps, o.engine.params);
            const bool failed = out.seeds[i].verdict != Verdict::pass;
            if (o.stop_at_new_failure && failed && !known.match(out.seeds[i]))
                for (std::size_t first = stop.load(); i < first && !stop.compare_exchange_weak(first, i);) {}
            return failed;
        },
        progress);
    if (stop.load() < n) out.seeds.resize(stop.load() + 1);
    for (RunResult& s : out.seeds) {
        out.total.add(s.stats);
        const KnownFinding* f = known.match(s);
        const bool fresh = s.verdict != Verdict::pass && !f;
        // A seed steered past a known finding met it: not a pass, even where its last run passed.
        out.failures += s.verdict != Verdict::pass || !s.steered_past.empty();
        s.known_finding = f ? f->id : fresh || s.steered_past.empty() ? "" : s.steered_past.front();
        out.known += !s.known_finding.empty() && !fresh;
        out.steered += !s.steered_past.empty();
    }
    out.met = findings_met(out.seeds, known, o.steps);
    out.unreproduced = unreproduced(known);
    out.oracles = out.seeds.front().oracles;  // the same engine and capabilities for every seed
    if (o.require_coverage) out.uncovered = coverage_gaps(out, known, o.engine.params);
    if (o.require_terms) {
        for (const auto& [name, t] : out.total.terms)
            if (!t.exercised()) out.unexercised.push_back(name);
        if (out.total.terms.empty()) out.unexercised.push_back("(the engine has no rule naming the terms)");
    }
    return out;
}

namespace {

// "cvec-x 3, lora-y 1 (file)", or the file alone when none matched.
std::string known_counts(const SwarmResult& r) {
    std::map<std::string, std::size_t> by_id;
    for (const RunResult& s : r.seeds) {
        for (const std::string& id : s.steered_past) ++by_id[id];
        const bool counted = std::find(s.steered_past.begin(), s.steered_past.end(), s.known_finding) != s.steered_past.end();
        if (!s.known_finding.empty() && !counted) ++by_id[s.known_finding];
    }
    std::string out;
    for (const auto& [id, n] : by_id) out += cat(out.empty() ? "" : ", ", id, " ", n);
    return cat(out.empty() ? "none seen" : out, " (", r.known_path, ")");
}

// `path` from the working directory where it lies beneath it (the demo runs
// from the repository root), else as it is.
std::string shown_path(const std::string& path) {
    const std::filesystem::path rel = std::filesystem::path(path).lexically_relative(std::filesystem::current_path());
    return rel.empty() || *rel.begin() == ".." ? path : rel.string();
}

std::string seeds_text(const std::vector<std::uint64_t>& seeds) {
    constexpr std::size_t kShown = 8;
    std::string out;
    for (std::size_t i = 0; i < seeds.size() && i < kShown; ++i) out += cat(i ? ", " : "", seeds[i]);
    return seeds.size() > kShown ? cat(out, ", ... (", seeds.size(), " seeds)") : out;
}

// The closing table of known findings met: what a newcomer reruns, reads
// and files.
std::string met_table(const std::vector<FindingMet>& met) {
    if (met.empty()) return "";
    std::string out = cat("known findings met: ", met.size(),
                          " (each: its seeds, a command that replays the first, its minimized trace, its standalone "
                          "program and data sheet, and what upstream knows)\n");
    for (const FindingMet& m : met) {
        out += cat("  ", m.id, ": seeds ", seeds_text(m.seeds), "\n", "    replay    ", m.replay, "\n",
                   "    trace     kvweld replay ", shown_path(m.trace), "\n");
        if (!m.program.empty()) out += cat("    program   ", m.program, " (llama.h alone; exits 1 while the bug shows)\n");
        if (!m.sheet.empty()) out += cat("    sheet     ", m.sheet, "\n");
        if (!m.upstream.empty()) out += cat("    upstream  ", m.upstream, "\n");
    }
    return out;
}

}  // namespace

std::string swarm_table(const SwarmResult& r, const SwarmOptions& o) {
    std::string out = cat("results over seeds ", o.first, "..", o.last, " on engine ", o.engine.engine, ":\n",
                          r.oracles.describe(), "\n");
    out += table_row("seeds", cat(r.seeds.size(), " (", r.failures, " failed",
                                  r.known_path.empty() ? "" : cat(", ", r.known, " of them known findings"), ")"));
    out += stats_rows(r.total, r.oracles);
    if (!r.known_path.empty()) out += table_row("known findings", known_counts(r));
    if (!r.known_path.empty())
        out += table_row("steered past a known finding",
                         o.steer ? cat(r.steered, " seeds (each run again around the finding's precondition, the rest "
                                                  "of it judged)")
                                 : std::string("off (--no-steer: a seed stops at its first known finding)"));
    out += table_row("ops judged per 1000 seeds",
                     cat(r.seeds.empty() ? 0 : r.total.ops_run * 1000 / r.seeds.size()));
    for (const RunResult& s : r.seeds) {
        if (s.verdict == Verdict::pass && s.steered_past.empty()) continue;
        const std::string steer = s.steered_past.empty() ? "" : cat(" --steer ", join_list(s.steered_past, ","));
        const std::string what = s.verdict == Verdict::pass
                                     ? cat("steered past ", join_list(s.steered_past, ", "), ", the rest passed")
                                     : failure_line(s).substr(std::string("verdict: FAIL ").size());
        out += cat(s.known_finding.empty() ? "FAIL" : cat("KNOWN (", s.known_finding, ")"), " seed ", s.config.seed,
                   s.steered_past.empty() || s.verdict == Verdict::pass ? "" : cat(" (steered past ", join_list(s.steered_past, ", "), ")"),
                   ": ", what, "\n  reproduce: ", reproduce_command(s.config, o.steps), steer, "\n");
    }
    for (const std::string& line : r.unreproduced) out += cat("FAIL ", line, "\n");
    for (const std::string& gap : r.uncovered) out += cat("FAIL ", gap, " (--require-coverage)\n");
    for (const std::string& term : r.unexercised)
        out += cat("FAIL reuse term ", term, " never exercised (--require-terms): ",
                   r.total.terms.count(term) && r.total.terms.at(term).tied ? "no pair of plans where it changed"
                                                                             : "no pair of plans where it alone changed",
                   "\n");
    out += met_table(r.met);
    const std::size_t fresh = r.failures - r.known;
    if (!r.ok())
        return out + cat("swarm verdict: FAIL (", fresh, " seeds with new failures",
                         r.unreproduced.empty() ? "" : cat(", ", r.unreproduced.size(), " known findings not reproduced"),
                         r.unexercised.empty() ? "" : cat(", ", r.unexercised.size(), " reuse terms never exercised"),
                         r.uncovered.empty() ? "" : cat(", ", r.uncovered.size(), " coverage gaps"),
                         ")\n");
    if (r.known)
        return out + cat("swarm verdict: NO NEW FINDINGS (not a pass: ", r.known,
                         " seeds fail with known findings of the engine, ", r.known_path, ")\n");
    return out + "swarm verdict: PASS\n";
}

}  // namespace kvweld::sim
