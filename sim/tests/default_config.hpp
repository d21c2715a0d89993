// The default engine's drawn configuration for a seed, for tests that run
// kvweld in process (with fault switches and a model named, where given).
#pragma once

#include "sim/sim_config.hpp"
#include "targets/registry.hpp"

#include <cstdint>
#include <string>

namespace kvweld::sim::testing {

inline SimConfig default_config(std::uint64_t seed, const std::string& faults = "", const std::string& model = "") {
    const std::string engine(targets::kDefaultEngine);
    return draw_config(seed, EngineChoice{engine, "", faults}, model, targets::engine_capabilities(engine));
}

}  // namespace kvweld::sim::testing
