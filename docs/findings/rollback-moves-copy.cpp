// A rollback of one sequence moves another: on a hybrid model with
// rollback snapshots (n_rs_seq > 0), llama_memory_seq_rm of sequence 0's
// suffix also rewinds sequence 1, a copy made with llama_memory_seq_cp
// that the caller never touched. kvweld's known finding
// rollback-moves-copy (targets/llamacpp/known_findings/b11434.json; its
// data sheet: rollback-moves-copy.md).
//
// Build against a llama.cpp install (b11434):
//   g++ -std=c++17 rollback-moves-copy.cpp -I$P/include -L$P/lib -lllama -lggml -lggml-base -Wl,-rpath,$P/lib
// Prints both sequences' last positions before and after the rollback;
// exit 1 where sequence 1's changed.
#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>

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

int main() {
    llama_backend_init();
    llama_model* model = lfm2();
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 2;
    cp.n_rs_seq = 4;  // snapshots for a rollback of up to 4 tokens
    cp.n_threads = cp.n_threads_batch = 1;
    llama_context* ctx = llama_init_from_model(model, cp);
    llama_memory_t mem = llama_get_memory(ctx);

    llama_batch batch = llama_batch_init(5, 0, 1);
    batch.n_tokens = 5;
    for (int i = 0; i < 5; ++i) {
        batch.token[i] = i + 1;
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i == 4;
    }
    if (llama_decode(ctx, batch) != 0) return 2;
    llama_memory_seq_cp(mem, 0, 1, -1, -1);  // sequence 1: a copy of sequence 0's 5 tokens
    const llama_pos before = llama_memory_seq_pos_max(mem, 1);
    const bool removed = llama_memory_seq_rm(mem, 0, 3, -1);  // roll sequence 0 back to 3 tokens
    const llama_pos after = llama_memory_seq_pos_max(mem, 1);
    std::printf("seq_rm(seq 0, [3, end)) = %d; seq 0 ends at %d; seq 1 ended at %d before, %d after\n", removed,
                llama_memory_seq_pos_max(mem, 0), before, after);
    llama_batch_free(batch);
    llama_free(ctx);
    llama_model_free(model);
    return after == before ? 0 : 1;
}
