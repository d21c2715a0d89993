// A copy made after a rollback decodes from the state before it: on a
// hybrid model with rollback snapshots (n_rs_seq > 0), sequence 0 decodes
// 5 tokens, llama_memory_seq_rm rolls it back to 3, and llama_memory_seq_cp
// copies it to sequence 1 before the next decode. Sequence 1's next row
// then differs from a fresh context's row for the same 3 tokens and the
// next, while sequence 0's matches. kvweld's known finding
// copy-after-rollback (targets/llamacpp/known_findings/b11434.json; its
// data sheet: copy-after-rollback.md).
//
// Build against a llama.cpp install (b11434):
//   g++ -std=c++17 rollback-moves-copy.cpp -I$P/include -L$P/lib -lllama -lggml -lggml-base -Wl,-rpath,$P/lib
// Prints each sequence's largest logit difference to the fresh context's
// row; exit 1 where the copy's passes 1e-3.
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

// The last row of `tokens` decoded into `seq` from position `pos0`.
static std::vector<float> decode(llama_context* ctx, llama_seq_id seq, llama_pos pos0, const std::vector<llama_token>& tokens) {
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
        const float* logits = llama_get_logits_ith(ctx, batch.n_tokens - 1);
        row.assign(logits, logits + 32);
    }
    llama_batch_free(batch);
    return row;
}

static llama_context* context(llama_model* model, uint32_t n_seq, uint32_t n_rs_seq) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128 * n_seq;
    cp.n_seq_max = n_seq;
    cp.n_rs_seq = n_rs_seq;  // snapshots for a rollback of up to this many tokens
    cp.n_threads = cp.n_threads_batch = 1;
    return llama_init_from_model(model, cp);
}

static float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size() || a.empty()) return 1e30f;
    float worst = 0.f;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

int main() {
    llama_backend_init();
    llama_model* model = lfm2();
    llama_context* fresh = context(model, 1, 0);
    const std::vector<float> want = decode(fresh, 0, 0, {1, 2, 3, 9});  // tokens 1 2 3, then 9
    llama_context* ctx = context(model, 2, 4);
    llama_memory_t mem = llama_get_memory(ctx);
    decode(ctx, 0, 0, {1, 2, 3, 4, 5});                      // 3 accepted, 2 drafts
    const bool removed = llama_memory_seq_rm(mem, 0, 3, -1);  // the drafts rejected
    llama_memory_seq_cp(mem, 0, 1, -1, -1);                   // a copy before the next decode
    const float copy = max_diff(decode(ctx, 1, 3, {9}), want);
    const float orig = max_diff(decode(ctx, 0, 3, {9}), want);
    std::printf("seq_rm(seq 0, [3, end)) = %d; next row against a fresh context: copy %g, rolled-back sequence %g\n",
                removed, copy, orig);
    llama_free(ctx);
    llama_free(fresh);
    llama_model_free(model);
    return copy > 1e-3f ? 1 : 0;
}
