// A seed of kvweld's own swarm that drew the paged design (draws_paged in
// sim/sim_config.hpp): the serving simulator on kvweld's paged engine, with
// its figures in the swarm's terms, so the default run covers both designs.
#pragma once

#include "sim/run.hpp"
#include "sim/serve/serve_config.hpp"

#include <string>

namespace kvweld::sim {

// What `kvweld sim --seed S [--model M]` runs for a paged seed; the same as
// `kvweld sim --engine kvweld-paged --seed S [--model M]`.
ServeConfig paged_seed_config(std::uint64_t seed, const std::string& model);

// `config` is the seed's draw (config.paged set); `model` the --model option.
RunResult run_paged_seed(const SimConfig& config, const std::string& model, int steps);

}  // namespace kvweld::sim
