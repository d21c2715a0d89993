// The server swarm: seeds in parallel, each a server of its own; known
// findings matched and their traces replayed; the table
// (sim/server/server_run.hpp).
#include "sim/server/server_known.hpp"
#include "sim/server/server_run.hpp"

#include "sim/run.hpp"
#include "sim/seed_pool.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace kvweld::sim::server {

namespace {

// One seed: run, and while it meets a known finding with a steer it was
// not steered past yet, run again steered (at most kMaxSteers times, as
// the library swarm) (its own folder, so no run's
// files meet another's). The last run is the seed's; every run's tally counts.
ServerRunResult run_seed(const ServerSwarmOptions& o, const ServerKnownFindings& known, std::uint64_t seed,
                         std::vector<std::string>& past) {
    ServerRunConfig c = server_config(o.server, o.preset, o.arch, seed, cat(o.work_dir, "/seed-", seed));
    c.request_timeout_s = o.request_timeout_s;
    ServerRunResult r = run_server_generated(c, o.steps);
    ServerTally judged;
    for (int n = 0; o.steer && n < kMaxSteers; ++n) {
        const ServerKnownFinding* f = known.match(r);
        if (!f || !f->steerable() || std::find(past.begin(), past.end(), f->id) != past.end()) break;
        past.push_back(f->id);
        judged.add(r.tally);
        c.settings = steered(c.settings, *f);
        c.work_dir = cat(o.work_dir, "/seed-", seed, "/steered-", past.size());
        r = run_server_generated(c, o.steps);
    }
    r.tally.add(judged);
    return r;
}

// What the seeds never exercised: an op variant never sent, a settings
// field whose draw never took a second value.
std::vector<std::string> unexercised(const ServerSwarmResult& r, const ServerSwarmOptions& o) {
    std::vector<std::string> out;
    for (const auto& [name, n] : r.total.variants)
        if (n == 0) out.push_back(cat("op variant ", name, " never sent"));
    std::map<std::string, std::set<std::string>> values;
    for (std::uint64_t seed = o.first; seed <= o.last; ++seed) {
        const nlohmann::json drawn = ServerSettings::draw(seed, o.arch).to_json();
        for (const auto& [name, value] : drawn.items())
            if (is_drawn(name, o.arch)) values[name].insert(value.dump());
    }
    for (const auto& [name, seen] : values)
        if (seen.size() < 2) out.push_back(cat("settings field '", name, "' drawn only as ", *seen.begin()));
    return out;
}

}  // namespace

ServerSwarmResult run_server_swarm(const ServerSwarmOptions& o, const std::function<void(std::size_t, std::size_t)>& progress) {
    const ServerKnownFindings known = server_known_findings_for(o.known_findings);
    const std::size_t n = std::size_t(o.last - o.first) + 1;
    ServerSwarmResult out;
    out.known_path = known.path;
    out.seeds.resize(n);
    out.known.resize(n);
    out.steered_past.resize(n);
    run_indexed(
        n, o.jobs,
        [&](std::size_t i) {
            std::vector<std::string>& past = out.steered_past[i];
            ServerRunResult r = run_seed(o, known, o.first + i, past);
            const ServerKnownFinding* f = known.match(r);
            // A seed steered past a known finding met it: not a pass, even where its last run passed.
            const bool fresh = r.verdict != ServerVerdict::pass && !f;
            out.known[i] = f ? f->id : fresh || past.empty() ? "" : past.front();
            const bool failed = r.verdict != ServerVerdict::pass;
            const std::string seed_dir = cat(o.work_dir, "/seed-", o.first + i);
            if (failed)
                std::ofstream(r.config.work_dir + "/trace.jsonl") << server_trace_text(r);
            else if (past.empty())
                std::filesystem::remove_all(seed_dir);
            r.ops.clear(), r.observed.clear();
            out.seeds[i] = std::move(r);
            return failed || !past.empty();
        },
        progress);
    for (std::size_t i = 0; i < n; ++i) {
        out.failures += out.seeds[i].verdict != ServerVerdict::pass || !out.steered_past[i].empty();
        out.total.add(out.seeds[i].tally);
        out.known_failures += !out.known[i].empty();
        out.steered += !out.steered_past[i].empty();
    }
    out.unreproduced = server_unreproduced(known, o.server, o.work_dir);
    if (o.require_terms) out.unexercised = unexercised(out, o);
    return out;
}

std::string server_swarm_table(const ServerSwarmResult& r, const ServerSwarmOptions& o) {
    std::string out = cat("results over seeds ", o.first, "..", o.last, " on llama-server ", o.server, " (", o.steps,
                          " ops each, a random ", o.preset, " model):\n");
    std::map<std::string, int> settings, known;
    for (const ServerRunResult& s : r.seeds)
        ++settings[s.config.settings.embeddings() ? "embeddings" : s.config.settings.cache_reuse ? "completions, chunk reuse" : "completions"];
    for (const auto& [what, n] : settings) out += cat("  ", what, ": ", n, " seeds\n");
    // Each finding counts the seeds that met it: steered past, or where the seed ended.
    for (std::size_t i = 0; i < r.seeds.size(); ++i) {
        for (const std::string& id : r.steered_past[i]) ++known[id];
        const std::vector<std::string>& past = r.steered_past[i];
        if (!r.known[i].empty() && std::find(past.begin(), past.end(), r.known[i]) == past.end()) ++known[r.known[i]];
    }
    std::string counts;
    for (const auto& [id, n] : known) counts += cat(counts.empty() ? "" : ", ", id, " ", n);
    for (const std::string& line : r.total.lines()) out += cat("  ", line, "\n");
    out += cat("  known findings: ", counts.empty() ? "none seen" : counts, " (", r.known_path.empty() ? "no file" : r.known_path, ")\n");    out += cat("  steered past a known finding: ", o.steer ? cat(r.steered, " seeds (each run again with the finding's steer, "
                                                                   "its settings around the precondition, and the rest of it judged)")
                                                       : std::string("off (--no-steer: a seed stops at its first known finding)"), "\n");
    for (std::size_t i = 0; i < r.seeds.size(); ++i) {
        const ServerRunResult& s = r.seeds[i];
        const std::vector<std::string>& past = r.steered_past[i];
        if (s.verdict == ServerVerdict::pass && past.empty()) continue;
        const std::string steers = past.empty() ? "" : cat(" [steered past ", join_list(past, ", "), "; its last run ",
                                                           s.verdict == ServerVerdict::pass ? "passed" : "failed", "]");
        const std::string trace = s.config.work_dir + "/trace.jsonl";
        const std::string what = s.failure ? cat(" at op ", s.failure->op, " (", s.failure->oracle, "): ",
                                                 s.failure->message.substr(0, s.failure->message.find('\n'))) : "";
        if (!r.known[i].empty()) {  // a known finding: one line, its trace named
            out += cat("KNOWN (", r.known[i], ") seed ", s.config.seed, " (", s.config.settings.describe(), ")", what.substr(0, 160),
                       steers, s.verdict == ServerVerdict::pass ? "" : cat("\n  trace: ", trace), "\n");
            continue;
        }
        out += cat(to_string(s.verdict), " seed ", s.config.seed, " (", s.config.settings.describe(), ")", steers,
                   s.failure ? cat(" at op ", s.failure->op, " (", s.failure->oracle, "): ", s.failure->message) : "",
                   "\n  trace: ", trace, "\n  server log: ", s.log, "\n  reproduce: kvweld replay --server ", o.server, " ", trace,
                   "\n  shrink: kvweld shrink --server ", o.server, " ", trace, " -o shrunk.jsonl",
                   "\n  script: kvweld repro --server ", o.server, " shrunk.jsonl -o finding.sh --run\n");
    }
    for (const std::string& line : r.unreproduced) out += cat("FAIL ", line, "\n");
    for (const std::string& line : r.unexercised) out += cat("FAIL ", line, " over seeds ", o.first, "..", o.last, " (--require-terms)\n");
    const std::size_t fresh = r.failures - r.known_failures;
    out += cat("verdict: ", r.ok() ? (r.failures ? "NO NEW FINDINGS" : "PASS") : "FAIL", " (", r.failures, " of ", r.seeds.size(),
               " seeds failed, ", r.known_failures, " of them known findings; ", fresh, " new; ", r.unreproduced.size(),
               " known findings unreproduced", o.require_terms ? cat("; ", r.unexercised.size(), " unexercised") : "", ")\n");
    return out;
}

}  // namespace kvweld::sim::server
