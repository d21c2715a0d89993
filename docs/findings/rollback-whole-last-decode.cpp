// A rollback of a recurrent state's whole last decode restores a state
// that decode never wrote: on a hybrid model (lfm2) with rollback
// snapshots (n_rs_seq > 0), after a decode of k tokens, llama_memory_seq_rm
// of those k tokens returns true, and the next token decodes from a wrong
// state; a rollback of fewer than k is exact. llama.cpp #26695 (closed)
// reports it; PR #25004 (open) fixes it. kvweld's known finding
// rollback-whole-last-decode (targets/llamacpp/known_findings/b11434.json;
// its data sheet: rollback-whole-last-decode.md).
//
// Build against a llama.cpp install (b11434):
//   g++ -std=c++17 rollback-whole-last-decode.cpp -I$P/include -L$P/lib -lllama -lggml -lggml-base -Wl,-rpath,$P/lib
// Prints, for a rollback of part of the last decode and of all of it, the
// next row against a fresh context's; exit 1 where the whole one is off.
#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// A 3-layer lfm2 (short convolutions on layers 0 and 2, attention on 1),
// vocabulary 32, width 32, weights from a fixed seed: no file.
static void fill(ggml_tensor* t, void*) {
    std::mt19937 gen(std::hash<std::string>{}(t->name));
    std::normal_distribution<float> normal(0.f, 0.3f);
    std::vector<float> v(ggml_nelements(t));
    for (float& x : v) x = normal(gen);
    if (t->type == GGML_TYPE_F32) return ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    std::vector<ggml_fp16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = ggml_fp32_to_fp16(v[i]);
    ggml_backend_tensor_set(t, h.data(), 0, ggml_nbytes(t));
}

static llama_model* lfm2() {
    gguf_context* g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "lfm2");
    gguf_set_val_str(g, "tokenizer.ggml.model", "none");
    gguf_set_val_u32(g, "lfm2.vocab_size", 32);
    gguf_set_val_u32(g, "lfm2.context_length", 256);
    gguf_set_val_u32(g, "lfm2.embedding_length", 32);
    gguf_set_val_u32(g, "lfm2.block_count", 3);
    gguf_set_val_u32(g, "lfm2.feed_forward_length", 64);
    gguf_set_val_f32(g, "lfm2.attention.layer_norm_rms_epsilon", 1e-5f);
    const uint32_t heads[3] = {4, 4, 4}, kv[3] = {0, 2, 0};
    gguf_set_arr_data(g, "lfm2.attention.head_count", GGUF_TYPE_UINT32, heads, 3);
    gguf_set_arr_data(g, "lfm2.attention.head_count_kv", GGUF_TYPE_UINT32, kv, 3);
    gguf_set_val_u32(g, "lfm2.shortconv.l_cache", 3);
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* m = llama_model_init_from_user(g, fill, nullptr, mp);
    gguf_free(g);
    return m;
}

// The last row of `tokens` decoded into sequence 0 from position `pos0`.
static std::vector<float> decode(llama_context* ctx, llama_pos pos0, const std::vector<llama_token>& tokens) {
    llama_batch batch = llama_batch_init(int32_t(tokens.size()), 0, 1);
    batch.n_tokens = int32_t(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        batch.token[i] = tokens[i];
        batch.pos[i] = pos0 + llama_pos(i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i + 1 == tokens.size();
    }
    std::vector<float> row;
    if (llama_decode(ctx, batch) == 0) {
        const float* logits = llama_get_logits_ith(ctx, batch.n_tokens - 1);
        row.assign(logits, logits + 32);
    }
    llama_batch_free(batch);
    return row;
}

static llama_context* context(llama_model* model, uint32_t n_rs_seq) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 1;
    cp.n_rs_seq = n_rs_seq;  // snapshots for a rollback of up to this many tokens
    cp.n_threads = cp.n_threads_batch = 1;
    return llama_init_from_model(model, cp);
}

// Tokens 1 2 3 4, then 10 11, then `back` of those 2 rolled back and 20
// decoded: its row against a fresh context's for the tokens kept and 20.
static float after_rollback(llama_model* model, int back, bool* removed) {
    std::vector<llama_token> kept = {1, 2, 3, 4, 10, 11};
    kept.resize(kept.size() - size_t(back));
    kept.push_back(20);
    llama_context* fresh = context(model, 0);
    const std::vector<float> want = decode(fresh, 0, kept);
    llama_context* ctx = context(model, 2);
    decode(ctx, 0, {1, 2, 3, 4});
    decode(ctx, 4, {10, 11});  // the last decode: 2 tokens
    *removed = llama_memory_seq_rm(llama_get_memory(ctx), 0, 6 - back, -1);
    const std::vector<float> got = decode(ctx, 6 - back, {20});
    float diff = got.size() == want.size() && !want.empty() ? 0.f : 1e30f;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) diff = std::max(diff, std::fabs(got[i] - want[i]));
    llama_free(ctx);
    llama_free(fresh);
    return diff;
}

int main() {
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);  // only this program's lines
    llama_backend_init();
    llama_model* model = lfm2();
    if (model == nullptr) return 2;
    bool part_removed = false, whole_removed = false;
    const float part = after_rollback(model, 1, &part_removed), whole = after_rollback(model, 2, &whole_removed);
    std::printf("n_rs_seq 2, a last decode of 2 tokens: rolled back 1: seq_rm %d, next row %g off a fresh context's; "
                "rolled back 2 (all of it): seq_rm %d, next row %g off\n", part_removed, part, whole_removed, whole);
    llama_model_free(model);
    if (whole_removed && whole > 1e-3f) {
        std::printf("FINDING SHOWN: exit 1\n");
        return 1;
    }
    std::printf("not shown: exit 0\n");
    return 0;
}
