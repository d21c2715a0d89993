#include "sim/mutants.hpp"

#include "engine/cat.hpp"
#include "sim/report.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace kvweld::sim {

bool matches(Detection expected, Verdict got) {
    switch (expected) {
        case Detection::stale_decode: return got == Verdict::stale_decode;
        case Detection::spurious_invalidation: return got == Verdict::spurious_invalidation;
        case Detection::missed_invalidation: return got == Verdict::missed_invalidation;
    }
    return false;
}

bool MutantsResult::ok() const {
    if (clean.failures != 0) return false;
    for (const MutantRow& r : rows)
        if (!r.killed || !r.class_matches) return false;
    return true;
}

namespace {

SwarmOptions swarm_options(const MutantsOptions& o, std::uint64_t first, std::uint64_t last) {
    SwarmOptions s;
    s.first = first;
    s.last = last;
    s.jobs = o.jobs;
    s.steps = o.steps;
    s.draw = DrawOptions{o.model, o.backend, {}};
    return s;
}

// Runs seeds in order, a batch at a time, until one fails or the budget is
// spent. The first failing seed is the same whatever the number of jobs.
MutantRow hunt(const FaultInfo& fault, const MutantsOptions& o) {
    MutantRow row;
    row.fault = fault;
    const std::uint64_t batch = static_cast<std::uint64_t>(std::max(1, o.jobs)) * 4;
    for (std::uint64_t first = 0; first < o.seeds && !row.killed; first += batch) {
        SwarmOptions s = swarm_options(o, first, std::min(o.seeds, first + batch) - 1);
        s.draw.faults.add(fault.fault);
        const SwarmResult r = run_swarm(s);
        for (const SeedResult& seed : r.seeds) {
            if (seed.verdict == Verdict::pass) continue;
            row.killed = true;
            row.first_seed = seed.config.seed;
            row.seeds_to_kill = seed.config.seed + 1;
            row.verdict = seed.verdict;
            row.failure = seed.failure;
            row.class_matches = matches(fault.expected, seed.verdict);
            break;
        }
    }
    return row;
}

}  // namespace

MutantsResult run_mutants(const MutantsOptions& o, const std::function<void(const std::string&)>& progress) {
    MutantsResult out;
    out.clean = run_swarm(swarm_options(o, 0, o.seeds - 1));
    if (progress) progress(cat("clean engine: ", out.clean.failures, " of ", o.seeds, " seeds failed"));
    for (const FaultInfo& f : all_faults()) {
        if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), f.fault) == o.only.end()) continue;
        out.rows.push_back(hunt(f, o));
        const MutantRow& r = out.rows.back();
        if (progress)
            progress(cat(f.name, ": ", r.killed ? cat("killed by seed ", r.first_seed) : std::string("SURVIVED")));
    }
    return out;
}

std::string mutants_table(const MutantsResult& r, const MutantsOptions& o) {
    std::string out = cat("kill matrix: ", o.seeds, " seeds x ", o.steps, " steps per fault, backend ",
                          to_string(o.backend), "\n");
    char line[256];
    std::snprintf(line, sizeof line, "%-24s %-9s %-11s %-22s %-22s %s\n", "fault", "result", "oracle",
                  "caught as", "expected", "seeds-to-kill");
    out += line;
    std::snprintf(line, sizeof line, "%-24s %-9s %-11s %-22s %-22s %s\n", "(clean engine)",
                  r.clean.failures == 0 ? "pass" : "FAILED", "-", "-", "pass",
                  cat(r.clean.failures, " failing seeds").c_str());
    out += line;
    for (const MutantRow& m : r.rows) {
        const std::string oracle = m.failure ? std::string(to_string(m.failure->oracle)) : "-";
        const std::string caught = m.killed ? std::string(to_string(m.verdict)) : "-";
        const std::string expected = cat(to_string(m.fault.expected), m.killed && !m.class_matches ? " MISMATCH" : "");
        std::snprintf(line, sizeof line, "%-24s %-9s %-11s %-22s %-22s %s\n", std::string(m.fault.name).c_str(),
                      m.killed ? "killed" : "SURVIVED", oracle.c_str(), caught.c_str(), expected.c_str(),
                      m.killed ? cat(m.seeds_to_kill).c_str() : cat("> ", o.seeds).c_str());
        out += line;
    }
    for (const MutantRow& m : r.rows) {
        if (!m.killed) continue;
        SimConfig c = draw_config(m.first_seed, DrawOptions{o.model, o.backend, {}});
        c.faults.add(m.fault.fault);
        out += cat("  ", m.fault.name, ": ", reproduce_command(c, o.steps, o.model.empty() ? c.model_name : o.model), "\n");
    }
    for (const SeedResult& s : r.clean.seeds)
        if (s.verdict != Verdict::pass)
            out += cat("  clean engine FAILED: ", reproduce_command(s.config, o.steps, s.config.model_name), "\n");
    out += r.ok() ? "kill matrix verdict: PASS\n" : "kill matrix verdict: FAIL\n";
    return out;
}

nlohmann::json mutants_json(const MutantsResult& r, const MutantsOptions& o) {
    nlohmann::json rows = nlohmann::json::array();
    for (const MutantRow& m : r.rows) {
        nlohmann::json j = {{"fault", m.fault.name},
                            {"killed", m.killed},
                            {"expected", to_string(m.fault.expected)},
                            {"class_matches", m.class_matches}};
        if (m.killed) {
            j["seeds_to_kill"] = m.seeds_to_kill;
            j["first_seed"] = m.first_seed;
            j["verdict"] = to_string(m.verdict);
            if (m.failure) j["oracle"] = to_string(m.failure->oracle);
        }
        rows.push_back(j);
    }
    return {{"seeds", o.seeds}, {"steps", o.steps}, {"backend", to_string(o.backend)},
            {"clean_failures", r.clean.failures}, {"ok", r.ok()}, {"faults", rows}};
}

}  // namespace kvweld::sim
