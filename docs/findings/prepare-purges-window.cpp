// A call's dry run deletes a sequence's window cells for real: before a
// call is computed, llama_kv_cache::prepare places each of its ubatches in
// turn to find their slots, and undoes that by restoring the cells of each
// slot (src/llama-kv-cache.cpp:769-826 in b11434). But placing a ubatch in
// a cell a sliding window masks also purges that sequence's positions up
// to the one overwritten (apply_ubatch, 1180-1198: seq_rm of positions
// outside the slot), and those are never restored. So when a later ubatch
// of the call takes a cell that an earlier ubatch's own tokens mask, the
// earlier ubatch is computed without that sequence's oldest positions.
// kvweld's known finding prepare-purges-window (targets/llamacpp/
// known_findings/b11434.json; its data sheet: prepare-purges-window.md).
//
// Here: an lfm2 model whose attention slides (window 14), rollback
// snapshots (n_rs_seq 2) and one unified cache. Sequence 4 holds 4
// tokens, sequence 6 held 32 and is removed; one call of sequence 4's next
// 12 and sequence 6's first 10 is split so that sequence 4's 12 run alone
// first (split_equal keeps a sequence's last n_rs_seq + 1 tokens in one
// ubatch) and sequence 6's 10 second, which in the dry run take cells
// sequence 4's window masks once its 12 are in.
//
// Build against a llama.cpp install (b11434):
//   g++ -std=c++17 prepare-purges-window.cpp -I$P/include -L$P/lib -lllama -lggml -lggml-base -Wl,-rpath,$P/lib
// Prints sequence 4's rows in that call against a fresh context's, and the
// same with the call split in two calls; exit 1 where the first is off.
#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

// A 2-layer lfm2 (a short convolution on layer 0, sliding attention on 1),
// vocabulary 16, width 16, weights from a fixed seed: no file.
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

static llama_model* lfm2_swa() {
    gguf_context* g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "lfm2");
    gguf_set_val_str(g, "tokenizer.ggml.model", "none");
    gguf_set_val_u32(g, "lfm2.vocab_size", 16);
    gguf_set_val_u32(g, "lfm2.context_length", 256);
    gguf_set_val_u32(g, "lfm2.embedding_length", 16);
    gguf_set_val_u32(g, "lfm2.block_count", 2);
    gguf_set_val_u32(g, "lfm2.feed_forward_length", 32);
    gguf_set_val_f32(g, "lfm2.attention.layer_norm_rms_epsilon", 1e-5f);
    const uint32_t heads[2] = {2, 2}, kv[2] = {0, 1};
    gguf_set_arr_data(g, "lfm2.attention.head_count", GGUF_TYPE_UINT32, heads, 2);
    gguf_set_arr_data(g, "lfm2.attention.head_count_kv", GGUF_TYPE_UINT32, kv, 2);
    gguf_set_val_u32(g, "lfm2.shortconv.l_cache", 3);
    gguf_set_val_u32(g, "lfm2.attention.sliding_window", 14);
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* m = llama_model_init_from_user(g, fill, nullptr, mp);
    gguf_free(g);
    return m;
}

static llama_context* context(llama_model* model) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 320;
    cp.n_seq_max = 10;
    cp.kv_unified = true;
    cp.swa_full = false;
    cp.n_rs_seq = 2;
    cp.n_threads = cp.n_threads_batch = 1;
    return llama_init_from_model(model, cp);
}

struct Part {
    llama_seq_id seq;
    llama_pos pos0;
    std::vector<llama_token> tokens;
};

// One call of the parts (every token an output); the rows of part `want`.
static std::vector<std::vector<float>> decode(llama_context* ctx, const std::vector<Part>& parts, size_t want) {
    int32_t n = 0;
    for (const Part& p : parts) n += int32_t(p.tokens.size());
    llama_batch batch = llama_batch_init(n, 0, 1);
    batch.n_tokens = n;
    int32_t i = 0, first = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
        if (k == want) first = i;
        for (size_t j = 0; j < parts[k].tokens.size(); ++j, ++i) {
            batch.token[i] = parts[k].tokens[j];
            batch.pos[i] = parts[k].pos0 + llama_pos(j);
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = parts[k].seq;
            batch.logits[i] = 1;
        }
    }
    std::vector<std::vector<float>> rows;
    if (llama_decode(ctx, batch) == 0)
        for (size_t j = 0; j < parts[want].tokens.size(); ++j) {
            const float* logits = llama_get_logits_ith(ctx, first + int32_t(j));
            rows.emplace_back(logits, logits + 16);
        }
    llama_batch_free(batch);
    return rows;
}

// Sequence 4's 12 rows of the call against a fresh context's; `split`:
// the call made as two calls, sequence 4's part first.
static float worst_row(llama_model* model, bool split) {
    const std::vector<llama_token> next = {1, 9, 11, 1, 6, 11, 15, 6, 8, 13, 14, 1};
    const std::vector<llama_token> held6 = {9, 9, 11, 1, 6, 11, 15, 6, 8, 13, 14, 1, 1, 1, 10, 7, 4, 11};
    llama_context* ctx = context(model);
    decode(ctx, {{4, 0, {0, 0}}, {6, 0, std::vector<llama_token>(14, 0)}}, 0);
    decode(ctx, {{4, 2, {0, 0}}, {6, 14, held6}}, 0);
    llama_memory_seq_rm(llama_get_memory(ctx), 6, -1, -1);  // sequence 6 ends; its cells are free
    const Part four{4, 4, next}, six{6, 0, std::vector<llama_token>(10, 0)};
    const auto got = split ? decode(ctx, {four}, 0) : decode(ctx, {four, six}, 0);
    llama_context* fresh = context(model);
    std::vector<llama_token> all = {0, 0, 0, 0};
    all.insert(all.end(), next.begin(), next.end());
    const auto want = decode(fresh, {{0, 0, all}}, 0);
    float worst = got.size() == next.size() ? 0.f : 1e30f;
    for (size_t j = 0; j < got.size(); ++j)
        for (int v = 0; v < 16; ++v) worst = std::max(worst, std::fabs(got[j][v] - want[4 + j][v]));
    llama_free(fresh);
    llama_free(ctx);
    return worst;
}

int main() {
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);  // only this program's lines
    llama_backend_init();
    llama_model* model = lfm2_swa();
    if (model == nullptr) return 2;
    const float together = worst_row(model, false), apart = worst_row(model, true);
    std::printf("sequence 4's 12 rows beside sequence 6's first 10: %g off a fresh context's; the same in two calls: %g\n",
                together, apart);
    llama_model_free(model);
    if (together > 1e-3f) {
        std::printf("FINDING SHOWN: exit 1\n");
        return 1;
    }
    std::printf("not shown: exit 0\n");
    return 0;
}
