// Model configuration: family and dims. validate() rejects impossible
// configs with a message naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <span>
#include <string_view>
#include <vector>

namespace kvweld {

enum class Family : std::uint8_t {
    llama,  // llama2.c's architecture
    qwen3,  // llama plus per-head RMSNorm on q and k
};

enum class Dtype : std::uint8_t { f32 };

std::string_view to_string(Family f);
Family family_from_string(std::string_view s);  // throws Error naming s
std::string_view to_string(Dtype d);

// llama.cpp's LLAMA_MAX_EXPERTS is far larger; kvweld's MoE models are tiny.
inline constexpr int kMaxExperts = 64;

struct ModelConfig {
    Family family = Family::llama;
    int vocab = 0;
    int dim = 0;
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;  // GQA: n_heads is a multiple of n_kv_heads
    int head_dim = 0;
    int ffn_dim = 0;
    int max_seq_len = 0;
    float rope_theta = 10000.0f;
    float norm_eps = 1e-5f;
    // Mixture of experts (0: a dense feed-forward). Each layer's router picks
    // the n_experts_used largest of n_experts logits; the chosen experts'
    // outputs are summed, weighted by the softmax over the chosen logits
    // (llama.cpp's llama architecture for Mixtral-style models).
    int n_experts = 0;
    int n_experts_used = 0;

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
    int kv_group() const { return n_heads / n_kv_heads; }
    bool moe() const { return n_experts > 0; }
    int experts_stored() const { return moe() ? n_experts : 1; }  // feed-forward copies per layer

    void validate() const;  // throws Error naming the field
    std::string describe() const;

    friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

// Named configurations: one table (engine/presets.cpp) for the engine, the
// simulator and every command line.
struct ModelPreset {
    std::string_view name;
    ModelConfig config;
    bool in_swarm;             // drawn by the swarm when no model is named
    std::string_view purpose;  // for help texts
};
std::span<const ModelPreset> model_presets();
std::string preset_names();  // "tiny, tiny-mha, ..." for help texts and errors
ModelConfig config_by_name(std::string_view name);  // throws Error naming the known names
// The swarm's models: small enough that a seed runs in milliseconds, with
// GQA, MHA, qwen3, and more than one layer.
std::vector<std::string_view> swarm_model_names();

ModelConfig tiny_config(Family family = Family::llama);  // "tiny" or "tiny-qwen3"
ModelConfig stories15m_config();                         // "stories15m"
ModelConfig config_110m();                               // "110m"

}  // namespace kvweld
