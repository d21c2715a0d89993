// kvweld's known finding kshift-all-window-aborts (fixed by kshift-all-window-aborts.patch; trace
// targets/llamacpp/known_findings/memories/kshift_all_window_aborts.jsonl):
// on an lfm2 model with a sliding window, where
// every attention layer slides, a context shift (seq_rm then seq_add, as
// llama-server makes one) aborts the process at the next llama_decode:
// the K-shift of llama_kv_cache_iswa's full-attention cache, which holds
// no layer, sets its k_shift input on a tensor with no buffer
// (llama_kv_cache::set_input_k_shift -> ggml_backend_buffer_is_host:
// GGML_ASSERT(buffer) in ggml/src/ggml-backend.cpp:345). Found by
// kvweld swarm --engine llamacpp --params arch=lfm2_swa (282 of 1000 seeds
// crash here); see docs/FINDINGS.md, "Memories other than llama's".
//
// Build against a llama.cpp install (b11434):
//   g++ -std=c++17 kshift-all-window-aborts.cpp -I$P/include -L$P/lib -lllama -lggml -lggml-base -Wl,-rpath,$P/lib
// The decode after the shift runs in a child process: exit 1 (FINDING
// SHOWN) when it aborts there, 0 when it returns.
#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
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
    gguf_set_val_u32(g, "lfm2.attention.sliding_window", 6);  // every attention layer slides
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* m = llama_model_init_from_user(g, fill, nullptr, mp);
    gguf_free(g);
    return m;
}

static int decode(llama_context* ctx, llama_pos pos0, int n) {
    llama_batch batch = llama_batch_init(n, 0, 1);
    batch.n_tokens = n;
    for (int i = 0; i < n; ++i) {
        batch.token[i] = 1;
        batch.pos[i] = pos0 + i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i == n - 1;
    }
    const int rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    return rc;
}

int main() {
    llama_backend_init();
    llama_model* model = lfm2();
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = 1;
    cp.swa_full = false;
    cp.n_threads = cp.n_threads_batch = 1;
    llama_context* ctx = llama_init_from_model(model, cp);
    llama_memory_t mem = llama_get_memory(ctx);
    std::printf("can_shift %d; decode of 11 tokens: %d\n", llama_memory_can_shift(mem), decode(ctx, 0, 11));
    llama_memory_seq_rm(mem, 0, 0, 5);        // a context shift: positions 0..4 dropped,
    llama_memory_seq_add(mem, 0, 5, -1, -5);  // the rest moved down by 5
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
        std::printf("decode after the shift: %d\n", decode(ctx, 6, 1));  // aborts on b11434
        std::fflush(stdout);
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    llama_free(ctx);
    llama_model_free(model);
    if (WIFSIGNALED(status)) {
        std::printf("FINDING SHOWN: llama_decode after the shift killed the process (signal %d, %s): exit 1\n", WTERMSIG(status),
                    strsignal(WTERMSIG(status)));
        return 1;
    }
    std::printf("not shown: exit 0\n");
    return 0;
}
