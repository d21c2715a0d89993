#include "sim/mutants.hpp"

#include "engine/cat.hpp"
#include "sim/report.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace kvweld::sim {

bool matches(const Detections& expected, Verdict got) {
    for (Detection d : all_detections())
        if (expected.has(d) && to_string(d) == to_string(got)) return true;
    return false;
}

bool MutantsResult::ok() const {
    if (clean.failures != 0) return false;
    for (const MutantRow& r : rows)
        if (!r.killed || !r.classes_match()) return false;
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

// Runs every seed of the budget with the fault on and tallies how each
// ended. The first failing seed is the same whatever the number of jobs.
MutantRow hunt(const FaultInfo& fault, const MutantsOptions& o) {
    MutantRow row;
    row.fault = fault;
    SwarmOptions s = swarm_options(o, 0, o.seeds - 1);
    s.draw.faults.add(fault.fault);
    const SwarmResult r = run_swarm(s);
    for (const SeedResult& seed : r.seeds) {
        ++row.by_verdict[static_cast<std::size_t>(seed.verdict)];
        if (seed.verdict == Verdict::pass) continue;
        if (!matches(fault.expected, seed.verdict) && !row.outside_seed) row.outside_seed = seed.config.seed;
        if (row.killed) continue;
        row.killed = true;
        row.first_seed = seed.config.seed;
        row.seeds_to_kill = seed.config.seed + 1;
        row.verdict = seed.verdict;
        row.failure = seed.failure;
    }
    return row;
}

// "stale_decode 68, missed_invalidation 49, pass 83"
std::string distribution(const MutantRow& m) {
    std::string out;
    for (int v = 1; v <= kVerdicts; ++v) {
        const auto verdict = static_cast<Verdict>(v % kVerdicts);  // failures first, pass last
        const std::uint64_t n = m.by_verdict[static_cast<std::size_t>(verdict)];
        if (n) out += cat(out.empty() ? "" : ", ", to_string(verdict), " ", n);
    }
    return out;
}

}  // namespace

MutantsResult run_mutants(const MutantsOptions& o, const std::function<void(const std::string&)>& progress) {
    MutantsResult out;
    out.clean = run_swarm(swarm_options(o, 0, o.seeds - 1));
    if (progress) progress(cat("clean engine: ", out.clean.failures, " of ", o.seeds, " seeds failed"));
    for (const FaultInfo& f : all_faults()) {
        if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), f.fault) == o.only.end()) continue;
        if (f.design == FaultDesign::paged) continue;  // driven through --engine kvweld-paged
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
    char line[512];
    auto add = [&](const std::string& fault, const char* result, const std::string& oracle, const std::string& expected,
                   const std::string& kill, const std::string& dist) {
        std::snprintf(line, sizeof line, "%-24s %-9s %-11s %-40s %-8s %s\n", fault.c_str(), result, oracle.c_str(),
                      expected.c_str(), kill.c_str(), dist.c_str());
        out += line;
    };
    add("fault", "result", "oracle", "expected classes", "to kill", "outcomes over the seeds");
    add("(clean engine)", r.clean.failures == 0 ? "pass" : "FAILED", "-", "pass", "-",
        cat("pass ", r.clean.seeds.size() - r.clean.failures, r.clean.failures ? cat(", FAILED ", r.clean.failures) : ""));
    for (const MutantRow& m : r.rows) {
        const char* result = !m.killed ? "SURVIVED" : m.classes_match() ? "killed" : "MISMATCH";
        add(std::string(m.fault.name), result, m.failure ? std::string(to_string(m.failure->oracle)) : "-",
            m.fault.expected.describe(), m.killed ? cat(m.seeds_to_kill) : cat("> ", o.seeds), distribution(m));
    }
    auto repro = [&](const FaultInfo& f, std::uint64_t seed) {
        SimConfig c = draw_config(seed, DrawOptions{o.model, o.backend, {}});
        c.faults.add(f.fault);
        return reproduce_command(c, o.steps, o.model.empty() ? c.model_name : o.model);
    };
    for (const MutantRow& m : r.rows) {
        if (m.killed) out += cat("  ", m.fault.name, ": ", repro(m.fault, m.first_seed), "\n");
        if (m.outside_seed)
            out += cat("  ", m.fault.name, " failed outside its classes: ", repro(m.fault, *m.outside_seed), "\n");
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
                            {"expected", m.fault.expected.describe()},
                            {"classes_match", m.classes_match()},
                            {"outcomes", outcomes_json(m.by_verdict)}};
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
