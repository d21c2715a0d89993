// A standalone reproducer of llama.cpp finding 'swa-full-state-drops-window', found by kvweld
// (targets/llamacpp/known_findings/b11434.json; its data sheet: swa-full-state-drops-window.md).
// It uses llama.h and libllama alone and makes a small granite_swa model from
// GGUF metadata (nothing downloaded); the same program is the test in
// docs/findings/server/swa-full-keeps-window.patch, the fix.
//   c++ -std=c++17 swa-full-state-drops-window.cpp -I$P/include -L$P/lib -lllama -lggml -lggml-base -Wl,-rpath,$P/lib
// Exit 1: the finding shows (the numbers are printed); 0: it does not.
//
// With swa_full the sliding-window cache is the context's full size, so that
// a sequence can be cut back to any position and go on from there
// (llama-server takes the window as kept whole then, and keeps prompts'
// states in RAM). llama_kv_cache::state_write leaves out of a sequence's
// state the cells its window masks, whatever the cache's size: a state
// loaded and cut back into those positions decodes over a window that lost
// them.
#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

static const uint32_t n_vocab = 32;

static void fill(ggml_tensor * t, void *) {
    std::mt19937 gen(std::hash<std::string>{}(t->name));
    std::normal_distribution<float> normal(0.f, 0.3f);
    std::vector<float> v(ggml_nelements(t));
    for (float & x : v) x = normal(gen);
    if (t->type == GGML_TYPE_F32) return ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    std::vector<ggml_fp16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = ggml_fp32_to_fp16(v[i]);
    ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
}

// A 2-layer granite_swa: layer 0 slides (window 4), layer 1 attends to all.
static llama_model * granite_swa() {
    gguf_context * g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "granite_swa");
    gguf_set_val_str(g, "tokenizer.ggml.model", "none");
    gguf_set_val_u32(g, "granite_swa.vocab_size", n_vocab);
    gguf_set_val_u32(g, "granite_swa.context_length", 256);
    gguf_set_val_u32(g, "granite_swa.embedding_length", 32);
    gguf_set_val_u32(g, "granite_swa.block_count", 2);
    gguf_set_val_u32(g, "granite_swa.feed_forward_length", 64);
    gguf_set_val_f32(g, "granite_swa.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_set_val_u32(g, "granite_swa.attention.head_count", 4);
    gguf_set_val_u32(g, "granite_swa.attention.head_count_kv", 2);
    gguf_set_val_f32(g, "granite_swa.rope.freq_base", 10000.f);
    gguf_set_val_u32(g, "granite_swa.attention.sliding_window", 4);
    const uint32_t pattern[2] = {1, 0};
    gguf_set_arr_data(g, "granite_swa.attention.sliding_window_pattern", GGUF_TYPE_UINT32, pattern, 2);
    for (const char * key : {"granite_swa.logit_scale", "granite_swa.residual_scale", "granite_swa.embedding_scale"}) {
        gguf_set_val_f32(g, key, 1.f);
    }
    gguf_set_val_f32(g, "granite_swa.attention.scale", 1.f / std::sqrt(8.f));
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * m = llama_model_init_from_user(g, fill, nullptr, mp);
    gguf_free(g);
    return m;
}

static llama_context * context(llama_model * model, uint32_t n_seq) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = n_seq;
        cp.swa_full = true;
    cp.n_threads = cp.n_threads_batch = 1;
    return llama_init_from_model(model, cp);
}

// The last row of `tokens` decoded into `seq` from position `pos0`.
static std::vector<float> decode(llama_context * ctx, llama_seq_id seq, llama_pos pos0, const std::vector<llama_token> & tokens) {
    llama_batch batch = llama_batch_init(int32_t(tokens.size()), 0, 1);
    batch.n_tokens = int32_t(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        batch.token[i] = tokens[i];
        batch.pos[i] = pos0 + llama_pos(i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = seq;
        batch.logits[i] = i + 1 == tokens.size();
    }
    std::vector<float> row;
    if (llama_decode(ctx, batch) == 0) {
        const float * logits = llama_get_logits_ith(ctx, batch.n_tokens - 1);
        row.assign(logits, logits + n_vocab);
    }
    llama_batch_free(batch);
    return row;
}

static float max_diff(const std::vector<float> & a, const std::vector<float> & b) {
    if (a.size() != b.size() || a.empty()) return 1e30f;
    float worst = 0.f;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

int main() {
    llama_backend_init();
    llama_model * model = granite_swa();
    const std::vector<llama_token> prompt = {5, 9, 2, 17, 30, 11, 7, 21, 3, 14, 26, 8};
    llama_context * fresh = context(model, 1);
    const std::vector<float> want = decode(fresh, 0, 0, {5, 9, 2, 17, 30, 11, 19});  // the prompt's first 6 tokens, then 19

    llama_context * src = context(model, 1);
    decode(src, 0, 0, prompt);  // its window masks positions 0..8
    std::vector<uint8_t> state(llama_state_seq_get_size(src, 0));
    state.resize(llama_state_seq_get_data(src, state.data(), state.size(), 0));

    llama_context * dst = context(model, 1);
    const size_t read = llama_state_seq_set_data(dst, state.data(), state.size(), 0);
    llama_memory_t mem = llama_get_memory(dst);
    const llama_pos pos_min = llama_memory_seq_pos_min(mem, 0);
    llama_memory_seq_rm(mem, 0, 6, -1);  // cut back to the prompt's first 6 tokens
    const float diff = max_diff(decode(dst, 0, 6, {19}), want);
    std::printf("state of %zu bytes loaded (%zu read): seq_pos_min %d; cut to 6 tokens, its next row against a fresh context: %g\n",
                state.size(), read, pos_min, diff);
    llama_free(dst);
    llama_free(src);
    llama_free(fresh);
    llama_model_free(model);
    const bool shown = read == 0 || diff > 1e-3f;
    std::puts(shown ? "FINDING SHOWN: exit 1" : "not shown: exit 0");
    return shown ? 1 : 0;
}
