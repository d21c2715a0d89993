// The kill matrix for an engine behind the ABI: the clean engine must pass
// every seed, and each of the fault switches the plugin lists
// (api.fault_names) must be caught on at least one seed of the same budget.
// Every seed runs for every fault; the table shows the outcome per class.
#pragma once

#include "sim/serve/serve_run.hpp"

#include <array>
#include <string>
#include <vector>

namespace kvweld::sim {

struct ServeMutantsOptions {
    std::uint64_t seeds = 50;
    int steps = 200;
    int jobs = 1;
    EngineChoice engine;              // faults ignored: each row sets its own
    std::string model;
    std::vector<std::string> faults;  // empty = every fault the plugin lists
};

struct ServeMutantRow {
    std::string fault;
    std::array<std::uint64_t, kVerdicts> by_verdict{};  // seeds per verdict, pass included
    std::optional<std::uint64_t> first_seed;           // the first failing seed
    std::optional<Failure> failure;                    // its failure
    bool killed() const { return first_seed.has_value(); }
};

struct ServeMutantsResult {
    ServeSwarmResult clean;
    std::vector<ServeMutantRow> rows;
    bool ok() const;
};

ServeMutantsResult run_serve_mutants(const ServeMutantsOptions& options,
                                     const std::function<void(const std::string&)>& progress = {});
std::string serve_mutants_table(const ServeMutantsResult& r, const ServeMutantsOptions& options);

}  // namespace kvweld::sim
