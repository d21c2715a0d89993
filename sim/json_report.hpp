// The simulator's JSON reports: one run (sim --json, replay
// --json), a swarm or one shard of it (swarm --json, the same header and
// merge as kvweld's own swarm reports: sim/shard.hpp), and a kill matrix
// (mutants --json). A run's report holds every count its table prints, so
// merge rebuilds the table from the shards' seeds.
#pragma once

#include "sim/mutants.hpp"
#include "sim/run.hpp"
#include "sim/shard.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace kvweld::sim {

inline constexpr const char* kSwarmFormat = "kvweld-swarm";

nlohmann::json json_report(const RunResult& r);
RunResult run_result_from_json(const nlohmann::json& j);  // throws Error naming the field

nlohmann::json swarm_json(const SwarmResult& r, const SwarmOptions& o, std::uint64_t range_first,
                                std::uint64_t range_last, Shard shard);

struct Merged {
    nlohmann::json report;  // as the unsharded run writes it
    SwarmResult result;
    SwarmOptions options;
};
Merged merge_reports(const std::vector<std::pair<std::string, nlohmann::json>>& named_reports);

nlohmann::json mutants_json(const MutantsResult& r, const MutantsOptions& o);

}  // namespace kvweld::sim
