// Model configuration: family and dims. validate() rejects impossible
// configs with a message naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvweld {

enum class Family : std::uint8_t {
    llama,  // llama2.c's architecture
    qwen3,  // llama plus per-head RMSNorm on q and k
};

enum class Dtype : std::uint8_t { f32 };

std::string_view to_string(Family f);
Family family_from_string(std::string_view s);  // throws Error naming s
std::string_view to_string(Dtype d);

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

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
    int kv_group() const { return n_heads / n_kv_heads; }

    void validate() const;  // throws Error naming the field
    std::string describe() const;

    friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

// Named configurations used by tests, tools and benchmarks.
ModelConfig tiny_config(Family family = Family::llama);
ModelConfig stories15m_config();  // llama2.c's stories15M dims
ModelConfig config_110m();        // ~110M parameters: dim 768, 12 layers
ModelConfig config_by_name(std::string_view name);  // "tiny", "tiny-qwen3", "stories15m", "110m"

}  // namespace kvweld
