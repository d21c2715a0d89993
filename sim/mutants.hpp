// The kill matrix: the clean engine must pass a fixed swarm budget, and
// each fault switch alone must be caught within it, by the expected class
// of failure. A fault added to the engine's table joins automatically.
#pragma once

#include "sim/swarm.hpp"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace kvweld::sim {

struct MutantRow {
    FaultInfo fault;
    bool killed = false;
    std::uint64_t seeds_to_kill = 0;  // 1 + index of the first failing seed
    std::uint64_t first_seed = 0;
    Verdict verdict = Verdict::pass;
    std::optional<Failure> failure;
    bool class_matches = false;
};

struct MutantsResult {
    SwarmResult clean;
    std::vector<MutantRow> rows;
    bool ok() const;
};

struct MutantsOptions {
    std::uint64_t seeds = 100;
    int steps = 300;
    int jobs = 1;
    std::string model;  // "" = drawn per seed
    Backend backend = Backend::cpu;
    std::vector<Fault> only;  // empty = every fault
};

bool matches(Detection expected, Verdict got);

MutantsResult run_mutants(const MutantsOptions& options,
                          const std::function<void(const std::string&)>& progress = {});
std::string mutants_table(const MutantsResult& r, const MutantsOptions& options);
nlohmann::json mutants_json(const MutantsResult& r, const MutantsOptions& options);

}  // namespace kvweld::sim
