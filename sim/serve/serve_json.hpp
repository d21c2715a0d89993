// The serving simulator's JSON reports: one run (sim --json, replay
// --json), a swarm or one shard of it (swarm --json, the same header and
// merge as kvweld's own swarm reports: sim/shard.hpp), and a kill matrix
// (mutants --json). A run's report holds every count its table prints, so
// merge rebuilds the table from the shards' seeds.
#pragma once

#include "sim/serve/serve_mutants.hpp"
#include "sim/serve/serve_run.hpp"
#include "sim/shard.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

namespace kvweld::sim {

inline constexpr const char* kServeSwarmFormat = "kvweld-serve-swarm";

nlohmann::json serve_json(const ServeResult& r);
ServeResult serve_result_from_json(const nlohmann::json& j);  // throws Error naming the field

nlohmann::json serve_swarm_json(const ServeSwarmResult& r, const ServeSwarmOptions& o, std::uint64_t range_first,
                                std::uint64_t range_last, Shard shard);

struct ServeMerged {
    nlohmann::json report;  // as the unsharded run writes it
    ServeSwarmResult result;
    ServeSwarmOptions options;
};
ServeMerged merge_serve_reports(const std::vector<std::pair<std::string, nlohmann::json>>& named_reports);

nlohmann::json serve_mutants_json(const ServeMutantsResult& r, const ServeMutantsOptions& o);

}  // namespace kvweld::sim
