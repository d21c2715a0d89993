// Models of llama.cpp's other memories, made from metadata alone
// (llama_model_init_from_user, include/llama.h:508, as llama.cpp's own
// tests/test-llama-archs.cpp does): no file, weights filled from a seed.
// Each architecture is here for the memory llama.cpp gives it
// (create_memory, src/llama-model.cpp): llama the plain KV cache,
// granite_swa the sliding-window one (llama_kv_cache_iswa), mamba the
// recurrent one (llama_memory_recurrent), lfm2 the hybrid one
// (llama_memory_hybrid: short-convolution layers with recurrent state,
// attention layers with KV; one of llm_arch_supports_rs_rollback's), and
// lfm2 with a sliding window the hybrid one with it
// (llama_memory_hybrid_iswa: src/models/lfm2.cpp makes every attention
// layer a sliding-window one when the key is there).
// Only releases that have llama_model_init_from_user can make them
// (b11434 and llama-cpp-python 0.3.36 do; 0.3.16 does not):
// kHasInitFromUser says which, and arch_model refuses elsewhere.
#pragma once

#include "targets/llamacpp/llama_arch_list.hpp"

#include <ggml-backend.h>
#include <ggml.h>
#include <gguf.h>
#include <llama.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kvweld::llamacpp {

// Whether llama.h has llama_model_init_from_user (looked up where the
// template is used, by its argument's type: false where it is missing).
template <class P>
inline constexpr bool kInitFromUser = requires(gguf_context* g, P p) {
    llama_model_init_from_user(g, nullptr, nullptr, p);
};
inline constexpr bool kHasInitFromUser = kInitFromUser<llama_model_params>;

struct ArchShape {
    std::uint32_t vocab = 64, embd = 64, ff = 128, layers = 3, heads = 4, heads_kv = 2, window = 8;
    std::uint32_t ctx_train = 256;  // its training context (a server caps a slot's at it)
    // Of the weights. At 0.1 a mamba model's next row moved by 2.6e-6 when
    // two tokens of its history were taken away, under any tolerance an
    // oracle could use: its state forgot them. At 0.3 every kind's moved by
    // 0.15 to 3.0 (logits up to 2.5), and a step still matches a fresh
    // prefill within 1e-4 (tests/memory_kinds_test.cpp).
    float stdev = 0.3f;
    // llama.cpp's dummy "test" vocabulary (tokens tok_0.., as kvweld's
    // GGUF writer gives llama-server), not none: a server detokenizes.
    bool test_vocab = false;
};

// The metadata llama.cpp reads for `arch` (the caller frees it with
// gguf_free). Keys are "<arch>.<name>" as llama-arch.cpp spells them.
inline gguf_context* arch_metadata(const ArchModel& model, const ArchShape& s) {
    const std::string arch = model.arch;
    gguf_context* g = gguf_init_empty();
    const auto key = [&](const char* name) { return arch + "." + name; };
    gguf_set_val_str(g, "general.architecture", arch.c_str());
    gguf_set_val_u32(g, key("vocab_size").c_str(), s.vocab);
    gguf_set_val_u32(g, key("context_length").c_str(), s.ctx_train);
    gguf_set_val_u32(g, key("embedding_length").c_str(), s.embd);
    gguf_set_val_u32(g, key("block_count").c_str(), s.layers);
    gguf_set_val_u32(g, key("feed_forward_length").c_str(), s.ff);
    gguf_set_val_f32(g, key("attention.layer_norm_rms_epsilon").c_str(), 1e-5f);
    if (s.test_vocab) {
        std::vector<std::string> names(s.vocab);
        std::vector<const char*> tokens(s.vocab);
        for (std::uint32_t i = 0; i < s.vocab; ++i) names[i] = "tok_" + std::to_string(i), tokens[i] = names[i].c_str();
        const std::vector<float> scores(s.vocab, 0.f);
        gguf_set_val_str(g, "tokenizer.ggml.model", "test");
        gguf_set_arr_str(g, "tokenizer.ggml.tokens", tokens.data(), tokens.size());
        gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores.data(), scores.size());
    } else {
        gguf_set_val_str(g, "tokenizer.ggml.model", "none");  // no vocabulary: tokens are ids
    }
    if (arch == "mamba") {
        gguf_set_val_u32(g, key("attention.head_count").c_str(), 0);
        gguf_set_val_u32(g, key("ssm.inner_size").c_str(), 2 * s.embd);
        gguf_set_val_u32(g, key("ssm.conv_kernel").c_str(), 4);
        gguf_set_val_u32(g, key("ssm.state_size").c_str(), 16);
        gguf_set_val_u32(g, key("ssm.time_step_rank").c_str(), s.heads);
        return g;
    }
    if (arch == "lfm2") {
        // Per layer: attention (KV heads) on odd layers, short convolution
        // (no KV heads: recurrent state) on even ones.
        std::vector<std::uint32_t> heads(s.layers, s.heads), kv(s.layers);
        for (std::uint32_t i = 0; i < s.layers; ++i) kv[i] = i % 2 ? s.heads_kv : 0;
        gguf_set_arr_data(g, key("attention.head_count").c_str(), GGUF_TYPE_UINT32, heads.data(), int(s.layers));
        gguf_set_arr_data(g, key("attention.head_count_kv").c_str(), GGUF_TYPE_UINT32, kv.data(), int(s.layers));
        gguf_set_val_u32(g, key("shortconv.l_cache").c_str(), 3);
        if (model.window) gguf_set_val_u32(g, key("attention.sliding_window").c_str(), s.window);
        return g;
    }
    gguf_set_val_u32(g, key("attention.head_count").c_str(), s.heads);
    gguf_set_val_u32(g, key("attention.head_count_kv").c_str(), s.heads_kv);
    gguf_set_val_f32(g, key("rope.freq_base").c_str(), 10000.f);
    if (arch == "granite_swa") {
        // Sliding-window layers on even layers, full attention on odd ones.
        std::vector<std::uint32_t> pattern(s.layers);
        for (std::uint32_t i = 0; i < s.layers; ++i) pattern[i] = i % 2 == 0;
        gguf_set_val_u32(g, key("attention.sliding_window").c_str(), s.window);
        gguf_set_arr_data(g, key("attention.sliding_window_pattern").c_str(), GGUF_TYPE_UINT32, pattern.data(), int(s.layers));
        for (const char* one : {"logit_scale", "residual_scale", "embedding_scale"}) gguf_set_val_f32(g, key(one).c_str(), 1.f);
        gguf_set_val_f32(g, key("attention.scale").c_str(), 1.f / std::sqrt(float(s.embd / s.heads)));
    }
    return g;
}

// The shape of kvweld's llama model `file` (vocabulary, width, depth,
// heads), for another architecture of the same size.
inline ArchShape arch_shape_of(const llama_model* file, std::uint32_t window) {
    ArchShape shape;
    shape.vocab = std::uint32_t(llama_vocab_n_tokens(llama_model_get_vocab(file)));
    shape.embd = std::uint32_t(llama_model_n_embd(file));
    shape.ff = 2 * shape.embd;
    shape.layers = std::uint32_t(llama_model_n_layer(file));
    shape.heads = std::uint32_t(llama_model_n_head(file));
    shape.heads_kv = std::uint32_t(llama_model_n_head_kv(file));
    shape.window = window;
    shape.ctx_train = std::uint32_t(llama_model_n_ctx_train(file));
    return shape;
}

// Fills each tensor from `seed` and its name (a recurrent model's ssm_a
// negative: its state decays).
struct FillSeed {
    std::uint32_t seed;
    float stdev;
};

inline void fill_from_seed(ggml_tensor* t, void* user) {
    const FillSeed& f = *static_cast<const FillSeed*>(user);
    std::mt19937 gen(f.seed ^ std::uint32_t(std::hash<std::string>{}(t->name)));
    std::normal_distribution<float> normal(0.f, f.stdev);
    const bool decay = std::strstr(t->name, "ssm_a") != nullptr;
    std::vector<float> v(std::size_t(ggml_nelements(t)));
    for (float& x : v) x = decay ? -std::fabs(normal(gen)) : normal(gen);
    if (t->type == GGML_TYPE_F32) {
        ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
        return;
    }
    std::vector<ggml_fp16_t> h(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) h[i] = ggml_fp32_to_fp16(v[i]);
    ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
}

// The model of `arch` filled from `seed`, or nullptr where llama.cpp
// refuses it.
// nullptr too where this release cannot make a model from metadata.
template <class P = llama_model_params>
inline llama_model* arch_model(const ArchModel& model, std::uint32_t seed, const ArchShape& s = {}) {
    if constexpr (!kInitFromUser<P>) {
        return nullptr;
    } else {
        gguf_context* meta = arch_metadata(model, s);
        P mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        FillSeed fill{seed, s.stdev};
        llama_model* m = llama_model_init_from_user(meta, fill_from_seed, &fill, mp);
        gguf_free(meta);
        return m;
    }
}

}  // namespace kvweld::llamacpp
