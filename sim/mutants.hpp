// The kill matrix for an engine behind the ABI: the clean engine must pass
// every seed, and each of the fault switches the plugin lists
// (api.fault_names) must be caught on at least one seed of the same budget,
// every failing seed in one of the classes the plugin declares for it
// ("name:class|class", ABI version 4). A fault without declared classes
// cannot be judged and fails its row. Every seed runs for every fault (or,
// with until_killed, each fault's seeds up to its first failure); the table
// shows the outcome per class.
#pragma once

#include "engine/faults.hpp"
#include "sim/run.hpp"

#include <array>
#include <string>
#include <vector>

namespace kvweld::sim {

struct MutantsOptions {
    std::uint64_t seeds = 50;
    int steps = 200;
    int jobs = 1;
    EngineChoice engine;              // faults ignored: each row sets its own
    std::string model;
    std::vector<std::string> faults;  // empty = every fault the plugin lists
    std::string known_findings;       // as SwarmOptions::known_findings
    // Each fault's seeds stop at its first new failure (SwarmOptions::
    // stop_at_new_failure): the kill and its class are judged, the later
    // seeds' outcomes are not counted. CI's matrices; the clean engine
    // still runs every seed.
    bool until_killed = false;
};

struct MutantRow {
    std::string fault;
    std::optional<Detections> expected;                 // the declared classes (nullopt: none declared)
    std::array<std::uint64_t, kVerdicts> by_verdict{};  // seeds per verdict, pass included
    std::array<std::uint64_t, kOracles> by_oracle{};    // failing seeds per oracle that caught them first
    std::optional<std::uint64_t> first_seed;           // the first failing seed
    std::optional<Failure> failure;                    // its failure
    std::optional<std::uint64_t> outside_seed;         // the first seed that failed outside `expected`
    std::uint64_t known = 0;                           // seeds that failed with a known finding of the engine
    bool caught() const { return first_seed.has_value(); }
    // Caught, and every failing seed in a declared class.
    bool killed() const { return caught() && expected && !outside_seed; }
};

// "data 12, weld 1": which oracle caught the row's failing seeds first, most first.
std::string caught_by(const MutantRow& row);

struct MutantsResult {
    SwarmResult clean;
    std::vector<MutantRow> rows;
    bool ok() const;
};

MutantsResult run_mutants(const MutantsOptions& options,
                                     const std::function<void(const std::string&)>& progress = {});
std::string mutants_table(const MutantsResult& r, const MutantsOptions& options);

}  // namespace kvweld::sim
