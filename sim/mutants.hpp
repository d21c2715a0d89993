// The kill matrix: the clean engine must pass a fixed swarm budget, and
// each fault switch alone must be caught within it. Every seed of the
// budget runs for every fault, and every failing seed must fail in one of
// the fault's expected classes (a set: see Detections), so a fault cannot
// pass by being caught once by luck. A fault added to the engine's table
// joins automatically.
#pragma once

#include "sim/swarm.hpp"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <string>
#include <vector>

namespace kvweld::sim {

struct MutantRow {
    FaultInfo fault;
    bool killed = false;
    std::uint64_t seeds_to_kill = 0;  // 1 + index of the first failing seed
    std::uint64_t first_seed = 0;
    Verdict verdict = Verdict::pass;   // the first failing seed's
    std::optional<Failure> failure;
    std::array<std::uint64_t, kVerdicts> by_verdict{};  // seeds per verdict, pass included
    std::optional<std::uint64_t> outside_seed;         // the first seed that failed outside the set
    bool classes_match() const { return !outside_seed.has_value(); }
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

bool matches(const Detections& expected, Verdict got);

MutantsResult run_mutants(const MutantsOptions& options,
                          const std::function<void(const std::string&)>& progress = {});
std::string mutants_table(const MutantsResult& r, const MutantsOptions& options);
nlohmann::json mutants_json(const MutantsResult& r, const MutantsOptions& options);

}  // namespace kvweld::sim
