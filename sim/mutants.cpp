#include "sim/mutants.hpp"

#include "targets/abi_lists.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "targets/registry.hpp"

#include <algorithm>
#include <cstdio>

namespace kvweld::sim {

bool MutantsResult::ok() const {
    if (!clean.ok() || rows.empty()) return false;
    for (const MutantRow& row : rows)
        if (!row.killed()) return false;
    return true;
}

namespace {

// A failing seed's verdict is one of the fault's declared classes.
bool matches(const Detections& expected, Verdict got) {
    for (Detection d : all_detections())
        if (expected.has(d) && to_string(d) == to_string(got)) return true;
    return false;
}

SwarmResult swarm_with(const MutantsOptions& o, const std::string& faults) {
    SwarmOptions s;
    s.first = 0;
    s.last = o.seeds - 1;
    s.jobs = o.jobs;
    s.steps = o.steps;
    s.engine = o.engine;
    s.engine.faults = faults;
    s.model = o.model;
    s.known_findings = o.known_findings;
    s.stop_at_new_failure = o.until_killed && !faults.empty();
    return run_swarm(s);
}

}  // namespace

MutantsResult run_mutants(const MutantsOptions& o,
                                     const std::function<void(const std::string&)>& progress) {
    const std::string list = engine_fault_list(o.engine.engine), name = engine_display_name(o.engine.engine);
    const std::vector<abi::ListedFault> listed = abi::split_fault_list(list.c_str());
    std::vector<std::string> faults = o.faults;
    if (faults.empty())
        for (const abi::ListedFault& f : listed) faults.push_back(f.name);
    for (const std::string& f : faults)
        require(abi::lists_fault(list.c_str(), f), "engine ", name, " has no fault switch '", f,
                "': its switches are ", listed.empty() ? std::string("(none)") : list);
    require(!faults.empty(), "engine ", name, " lists no fault switches",
            kFaultsCompiled ? "" : " (a build without KVWELD_FAULTS has none)", ": nothing to kill");
    MutantsResult r;
    r.clean = swarm_with(o, "");
    if (progress)
        progress(cat("clean: ", r.clean.failures, " of ", o.seeds, " seeds failed",
                     r.clean.known ? cat(" (", r.clean.known, " with known findings)") : ""));
    for (const std::string& fault : faults) {
        const SwarmResult s = swarm_with(o, fault);
        MutantRow row;
        row.fault = fault;
        for (const abi::ListedFault& f : listed)
            if (f.name == fault && !f.classes.empty()) row.expected = Detections::parse(f.classes);
        for (const RunResult& seed : s.seeds) {
            // A known finding of the engine is the engine's, not the fault's.
            if (!seed.known_finding.empty()) {
                ++row.known;
                continue;
            }
            ++row.by_verdict[std::size_t(seed.verdict)];
            if (seed.verdict == Verdict::pass) continue;
            if (seed.failure) ++row.by_oracle[std::size_t(seed.failure->oracle)];
            if (!row.first_seed) {
                row.first_seed = seed.config.seed;
                row.failure = seed.failure;
            }
            if (row.expected && !matches(*row.expected, seed.verdict) && !row.outside_seed)
                row.outside_seed = seed.config.seed;
        }
        if (progress)
            progress(cat(fault, ": ", row.killed()   ? cat("killed, first at seed ", *row.first_seed)
                                      : row.caught() ? "caught, but not as declared"
                                                     : "survived"));
        r.rows.push_back(std::move(row));
    }
    return r;
}

std::string caught_by(const MutantRow& row) {
    std::vector<int> order;
    for (int o = 0; o < kOracles; ++o)
        if (row.by_oracle[std::size_t(o)]) order.push_back(o);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return row.by_oracle[std::size_t(a)] > row.by_oracle[std::size_t(b)]; });
    std::string out;
    for (int o : order) out += cat(out.empty() ? "" : ", ", to_string(Oracle(o)), " ", row.by_oracle[std::size_t(o)]);
    return out.empty() ? "-" : out;
}

std::string mutants_table(const MutantsResult& r, const MutantsOptions& o) {
    std::string out = cat("kill matrix on engine ", o.engine.engine, ": seeds 0..", o.seeds - 1, ", ", o.steps,
                          " ops each",
                          o.until_killed ? " (--until-killed: each fault's outcomes up to its first new failure)" : "",
                          "\n", r.clean.oracles.describe(), "\n");
    out += cat("clean engine: ", o.seeds - r.clean.failures, " of ", o.seeds, " seeds pass",
               r.clean.known ? cat(", ", r.clean.known, " fail with known findings (", r.clean.known_path, ")") : "",
               "\n");
    char line[384];
    std::snprintf(line, sizeof line, "%-23s %-7s %-14s %-38s %-24s %s\n", "fault", "killed", "seeds-to-kill",
                  "declared classes", "caught first by", "outcomes");
    out += line;
    for (const MutantRow& row : r.rows) {
        std::string outcomes;
        for (int v = 0; v < kVerdicts; ++v)
            if (row.by_verdict[std::size_t(v)])
                outcomes += cat(outcomes.empty() ? "" : ", ", to_string(Verdict(v)), " ", row.by_verdict[std::size_t(v)]);
        if (row.known) outcomes += cat(", known finding ", row.known);
        std::snprintf(line, sizeof line, "%-23s %-7s %-14s %-38s %-24s %s\n", row.fault.c_str(),
                      row.killed() ? "yes" : "NO", row.caught() ? std::to_string(*row.first_seed + 1).c_str() : "-",
                      row.expected ? row.expected->describe().c_str() : "(none declared)", caught_by(row).c_str(),
                      outcomes.c_str());
        out += line;
    }
    for (const MutantRow& row : r.rows) {
        if (!row.expected)
            out += cat("  ", row.fault, ": the plugin declares no classes for it (ABI 4: \"name:class|class\" in "
                       "fault_names), so its failures cannot be judged\n");
        if (row.outside_seed)
            out += cat("  ", row.fault, ": seed ", *row.outside_seed, " failed outside its declared classes\n");
    }
    for (const MutantRow& row : r.rows)
        if (row.failure)
            out += cat("  ", row.fault, ", seed ", *row.first_seed, ": ", to_string(row.failure->oracle), " oracle at op ",
                       row.failure->op_index, " (", row.failure->op, "): ", row.failure->detail, "\n");
    for (const RunResult& s : r.clean.seeds)
        if (s.verdict != Verdict::pass)
            out += cat("clean ", s.known_finding.empty() ? "FAIL" : cat("KNOWN (", s.known_finding, ")"), " seed ",
                       s.config.seed, ": ", to_string(s.verdict), s.failure ? cat(": ", s.failure->detail) : "", "\n");
    for (const std::string& line : r.clean.unreproduced) out += cat("FAIL ", line, "\n");
    out += r.ok() ? "kill matrix verdict: PASS\n" : "kill matrix verdict: FAIL\n";
    return out;
}

}  // namespace kvweld::sim
