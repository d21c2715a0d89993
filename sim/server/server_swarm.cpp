// The server swarm: seeds in parallel, each a server of its own; known
// findings matched and their traces replayed; the table
// (sim/server/server_run.hpp).
#include "sim/server/server_known.hpp"
#include "sim/server/server_run.hpp"

#include "sim/seed_pool.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <filesystem>
#include <fstream>
#include <map>

namespace kvweld::sim::server {

ServerSwarmResult run_server_swarm(const ServerSwarmOptions& o, const std::function<void(std::size_t, std::size_t)>& progress) {
    const ServerKnownFindings known = server_known_findings_for(o.known_findings);
    const std::size_t n = std::size_t(o.last - o.first) + 1;
    ServerSwarmResult out;
    out.known_path = known.path;
    out.seeds.resize(n);
    out.known.resize(n);
    run_indexed(
        n, o.jobs,
        [&](std::size_t i) {
            ServerRunConfig c = server_config(o.server, o.preset, o.first + i, cat(o.work_dir, "/seed-", o.first + i));
            c.request_timeout_s = o.request_timeout_s;
            ServerRunResult r = run_server_generated(c, o.steps);
            const bool failed = r.verdict != ServerVerdict::pass;
            if (const ServerKnownFinding* f = known.match(r)) out.known[i] = f->id;
            if (failed)
                std::ofstream(r.config.work_dir + "/trace.jsonl") << server_trace_text(r);
            else
                std::filesystem::remove_all(r.config.work_dir);
            r.ops.clear(), r.observed.clear();
            out.seeds[i] = std::move(r);
            return failed;
        },
        progress);
    for (std::size_t i = 0; i < n; ++i) {
        out.failures += out.seeds[i].verdict != ServerVerdict::pass;
        out.total.add(out.seeds[i].tally);
        out.known_failures += !out.known[i].empty();
    }
    out.unreproduced = server_unreproduced(known, o.server, o.work_dir);
    return out;
}

std::string server_swarm_table(const ServerSwarmResult& r, const ServerSwarmOptions& o) {
    std::string out = cat("results over seeds ", o.first, "..", o.last, " on llama-server ", o.server, " (", o.steps,
                          " ops each, a random ", o.preset, " model):\n");
    std::map<std::string, int> settings, known;
    for (const ServerRunResult& s : r.seeds)
        ++settings[s.config.settings.embeddings() ? "embeddings" : s.config.settings.cache_reuse ? "completions, chunk reuse" : "completions"];
    for (const auto& [what, n] : settings) out += cat("  ", what, ": ", n, " seeds\n");
    for (const std::string& id : r.known)
        if (!id.empty()) ++known[id];
    std::string counts;
    for (const auto& [id, n] : known) counts += cat(counts.empty() ? "" : ", ", id, " ", n);
    for (const std::string& line : r.total.lines()) out += cat("  ", line, "\n");
    out += cat("  known findings: ", counts.empty() ? "none seen" : counts, " (", r.known_path.empty() ? "no file" : r.known_path, ")\n");
    for (std::size_t i = 0; i < r.seeds.size(); ++i) {
        const ServerRunResult& s = r.seeds[i];
        if (s.verdict == ServerVerdict::pass) continue;
        const std::string trace = s.config.work_dir + "/trace.jsonl";
        const std::string what = s.failure ? cat(" at op ", s.failure->op, " (", s.failure->oracle, "): ",
                                                 s.failure->message.substr(0, s.failure->message.find('\n'))) : "";
        if (!r.known[i].empty()) {  // a known finding: one line, its trace named
            out += cat("KNOWN (", r.known[i], ") seed ", s.config.seed, " (", s.config.settings.describe(), ")", what.substr(0, 160),
                       "\n  trace: ", trace, "\n");
            continue;
        }
        out += cat(to_string(s.verdict), " seed ", s.config.seed, " (", s.config.settings.describe(), ")",
                   s.failure ? cat(" at op ", s.failure->op, " (", s.failure->oracle, "): ", s.failure->message) : "",
                   "\n  trace: ", trace, "\n  server log: ", s.log, "\n  reproduce: kvweld replay --server ", o.server, " ", trace,
                   "\n  shrink: kvweld shrink --server ", o.server, " ", trace, " -o shrunk.jsonl",
                   "\n  script: kvweld repro --server ", o.server, " shrunk.jsonl -o finding.sh --run\n");
    }
    for (const std::string& line : r.unreproduced) out += cat("FAIL ", line, "\n");
    const std::size_t fresh = r.failures - r.known_failures;
    out += cat("verdict: ", r.ok() ? (r.failures ? "NO NEW FINDINGS" : "PASS") : "FAIL", " (", r.failures, " of ", r.seeds.size(),
               " seeds failed, ", r.known_failures, " of them known findings; ", fresh, " new; ", r.unreproduced.size(),
               " known findings unreproduced)\n");
    return out;
}

}  // namespace kvweld::sim::server
