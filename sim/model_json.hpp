// A trace's model spec: its name, every dimension and the weights seed.
// Reading refuses a model no simulation here could hold.
#pragma once

#include "engine/config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace kvweld::sim {

nlohmann::json model_to_json(const std::string& name, const ModelConfig& model, std::uint64_t weights_seed);
ModelConfig model_from_json(const nlohmann::json& m);  // throws Error naming the field

}  // namespace kvweld::sim
