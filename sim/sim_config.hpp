// One run's configuration. Swarm testing: the seed decides which op kinds
// are enabled and how often, how many slots, which policies, which model,
// how long prompts and outputs are, and how speculative decoding behaves.
#pragma once

#include "engine/config.hpp"
#include "engine/decode_session.hpp"
#include "engine/faults.hpp"
#include "sim/ops.hpp"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace kvweld::sim {

// How admit gets its cache: a new allocation, the slot's own cache rewound
// with truncate_to(0), or either, drawn per request.
enum class CachePolicy : std::uint8_t { fresh, recycle, mixed };
std::string_view to_string(CachePolicy p);

struct SimConfig {
    std::uint64_t seed = 0;
    std::array<int, kOpKinds> weights{};  // 0 = disabled, else 1..100
    int slots = 1;                        // 1..16
    CachePolicy cache_policy = CachePolicy::fresh;
    RebindPolicy rebind_policy = RebindPolicy::rebind;
    bool retire_keeps_cache = true;
    bool sampled = false;  // sample from the logits, else greedy
    std::string model_name = "tiny";
    ModelConfig model;
    // The capacities (max_seq_len) a fresh cache may have, each in
    // max_prompt+1..model.max_seq_len; an admit picks one. Caches smaller
    // than the model exercise the key's capacity and refused rebinds.
    std::vector<int> capacities;
    std::uint64_t weights_seed = 1;
    int max_prompt = 8;     // prompts are 1..max_prompt tokens
    int max_new = 32;       // output budgets are 0..max_new tokens
    int spec_k = 4;         // speculative: k decodes (1 pending + k-1 drafts)
    float accept_mean = 0.5f;
    float same_weights_chance = 0.5f;  // on reload
    Backend backend = Backend::cpu;
    FaultSet faults;
    // The paged KV design: the seed is run by the serving simulator on
    // kvweld's paged engine (one pool, one plan for every sequence) instead
    // of this simulator's dense slots; the fields above then only record
    // what the seed drew (see draws_paged).
    bool paged = false;

    std::string describe() const;  // one line per group, no ids or pointers
};

struct DrawOptions {
    std::string model;  // "" = drawn per seed; else a config name
    Backend backend = Backend::cpu;
    FaultSet faults;
};

SimConfig draw_config(std::uint64_t seed, const DrawOptions& options = {});

// Whether a seed of the default run draws the paged design: one seed in
// four, from a stream of its own (so every dense config is what it was),
// and only where the paged engine can serve the run: no dense fault
// switch, the CPU backend, a llama-family model.
bool draws_paged(std::uint64_t seed, const DrawOptions& options);

void to_json(nlohmann::json& j, const SimConfig& c);
// A trace's model spec: its name, every dimension and the weights seed.
// Reading refuses a model no simulation here could hold.
nlohmann::json model_to_json(const std::string& name, const ModelConfig& model, std::uint64_t weights_seed);
ModelConfig model_from_json(const nlohmann::json& m);  // throws Error naming the field
SimConfig config_from_json(const nlohmann::json& j);  // strict; throws Error naming the field

}  // namespace kvweld::sim
