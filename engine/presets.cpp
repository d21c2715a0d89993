// The one table of named model configurations.
#include "util/cat.hpp"
#include "engine/config.hpp"
#include "util/error.hpp"

#include <array>

namespace kvweld {

namespace {

constexpr ModelConfig kTiny{.family = Family::llama, .vocab = 64, .dim = 32, .n_layers = 2, .n_heads = 4,
                            .n_kv_heads = 2, .head_dim = 8, .ffn_dim = 64, .max_seq_len = 256};

constexpr ModelConfig with_family(ModelConfig c, Family f) {
    c.family = f;
    return c;
}

constexpr ModelConfig moe(ModelConfig c, int n_experts, int n_used) {
    c.n_experts = n_experts;
    c.n_experts_used = n_used;
    return c;
}

constexpr ModelConfig mha(ModelConfig c) {
    c.n_kv_heads = c.n_heads;
    return c;
}

constexpr std::array kPresets = {
    ModelPreset{"tiny", kTiny, true, "llama, GQA, 2 layers (tests, swarm)"},
    ModelPreset{"tiny-mha", mha(kTiny), true, "llama, MHA (swarm)"},
    ModelPreset{"tiny-qwen3", with_family(kTiny, Family::qwen3), true, "qwen3, GQA (tests, swarm)"},
    // Not in the swarm's draw (that would move every seed's model): the
    // simulator swaps it in for "tiny" on its own stream (sim/sim_config.cpp).
    ModelPreset{"tiny-moe", moe(kTiny, 4, 2), false, "llama, GQA, 4 experts of which 2 are used (swarm, tests)"},
    ModelPreset{"small",
                {.family = Family::llama, .vocab = 96, .dim = 48, .n_layers = 3, .n_heads = 6,
                 .n_kv_heads = 3, .head_dim = 8, .ffn_dim = 96, .max_seq_len = 128},
                true, "llama, GQA, 3 layers (swarm)"},
    ModelPreset{"micro",
                {.family = Family::llama, .vocab = 16, .dim = 16, .n_layers = 2, .n_heads = 2,
                 .n_kv_heads = 1, .head_dim = 8, .ffn_dim = 32, .max_seq_len = 32},
                false, "a decode in microseconds (fuzzers)"},
    ModelPreset{"tiny-h64",
                {.family = Family::llama, .vocab = 64, .dim = 128, .n_layers = 2, .n_heads = 2,
                 .n_kv_heads = 1, .head_dim = 64, .ffn_dim = 128, .max_seq_len = 256},
                false, "llama, head size 64: llama.cpp rotates a quantized KV cache there (coverage)"},
    ModelPreset{"stories15m",
                {.family = Family::llama, .vocab = 32000, .dim = 288, .n_layers = 6, .n_heads = 6,
                 .n_kv_heads = 6, .head_dim = 48, .ffn_dim = 768, .max_seq_len = 256},
                false, "llama2.c's stories15M dims (benchmarks)"},
    ModelPreset{"110m",
                {.family = Family::llama, .vocab = 32000, .dim = 768, .n_layers = 12, .n_heads = 12,
                 .n_kv_heads = 12, .head_dim = 64, .ffn_dim = 2048, .max_seq_len = 1024},
                false, "~110M parameters (benchmarks)"},
};

}  // namespace

std::span<const ModelPreset> model_presets() { return kPresets; }

std::string preset_names() {
    std::string out;
    for (const ModelPreset& p : kPresets) out += cat(out.empty() ? "" : ", ", p.name);
    return out;
}

ModelConfig config_by_name(std::string_view name) {
    for (const ModelPreset& p : kPresets)
        if (p.name == name) return p.config;
    throw Error(cat("unknown model config '", name, "': expected one of ", preset_names()));
}

std::vector<std::string_view> swarm_model_names() {
    std::vector<std::string_view> out;
    for (const ModelPreset& p : kPresets)
        if (p.in_swarm) out.push_back(p.name);
    return out;
}

ModelConfig tiny_config(Family family) {
    return config_by_name(family == Family::qwen3 ? "tiny-qwen3" : "tiny");
}
ModelConfig stories15m_config() { return config_by_name("stories15m"); }
ModelConfig config_110m() { return config_by_name("110m"); }

}  // namespace kvweld
