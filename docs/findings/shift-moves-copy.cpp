// A context shift of one sequence moves another: on a recurrent model
// (mamba), llama_memory_seq_add of sequence 0 also moves sequence 1, a
// copy made with llama_memory_seq_cp that the caller never touched, and
// sequence 1's next token is refused. kvweld's known finding
// shift-moves-copy (targets/llamacpp/known_findings/b11434.json; its data
// sheet: shift-moves-copy.md).
//
// Build against a llama.cpp install (b11434):
//   g++ -std=c++17 shift-moves-copy.cpp -I$P/include -L$P/lib -lllama -lggml -lggml-base -Wl,-rpath,$P/lib
// Prints sequence 1's last position before and after sequence 0's shift,
// and what llama_decode says to sequence 1's next token; exit 1 where
// sequence 1's position changed.
#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

// A 2-layer mamba, vocabulary 32, width 32, weights from a fixed seed: no file.
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

static llama_model* mamba() {
    gguf_context* g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "mamba");
    gguf_set_val_str(g, "tokenizer.ggml.model", "none");
    gguf_set_val_u32(g, "mamba.vocab_size", 32);
    gguf_set_val_u32(g, "mamba.context_length", 256);
    gguf_set_val_u32(g, "mamba.embedding_length", 32);
    gguf_set_val_u32(g, "mamba.block_count", 2);
    gguf_set_val_u32(g, "mamba.feed_forward_length", 0);
    gguf_set_val_f32(g, "mamba.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_set_val_u32(g, "mamba.attention.head_count", 0);
    gguf_set_val_u32(g, "mamba.ssm.inner_size", 64);
    gguf_set_val_u32(g, "mamba.ssm.conv_kernel", 4);
    gguf_set_val_u32(g, "mamba.ssm.state_size", 16);
    gguf_set_val_u32(g, "mamba.ssm.time_step_rank", 4);
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* m = llama_model_init_from_user(g, fill, nullptr, mp);
    gguf_free(g);
    return m;
}

// One token of `seq` at `pos`: llama_decode's result.
static int decode_one(llama_context* ctx, llama_seq_id seq, llama_pos pos) {
    llama_batch batch = llama_batch_init(1, 0, 1);
    batch.n_tokens = 1;
    batch.token[0] = 7;
    batch.pos[0] = pos;
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = seq;
    batch.logits[0] = true;
    const int rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    return rc;
}

int main() {
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);  // only this program's lines
    llama_backend_init();
    llama_model* model = mamba();
    if (model == nullptr) return 2;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 2;
    cp.n_threads = cp.n_threads_batch = 1;
    llama_context* ctx = llama_init_from_model(model, cp);
    llama_memory_t mem = llama_get_memory(ctx);
    llama_batch batch = llama_batch_init(3, 0, 1);
    batch.n_tokens = 3;
    for (int i = 0; i < 3; ++i) {
        batch.token[i] = i + 1;
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i == 2;
    }
    if (llama_decode(ctx, batch) != 0) return 2;
    llama_batch_free(batch);
    llama_memory_seq_cp(mem, 0, 1, -1, -1);  // sequence 1: a copy of sequence 0's 3 tokens
    const llama_pos before = llama_memory_seq_pos_max(mem, 1);
    // A context shift of sequence 0, as llama-server makes one (n_keep 0,
    // n_discard 1): the removal is a no-op on a recurrent state (by design),
    // the move is taken.
    std::printf("can_shift %d; seq_rm(seq 0, [0, 1)) = %d\n", llama_memory_can_shift(mem), llama_memory_seq_rm(mem, 0, 0, 1));
    llama_memory_seq_add(mem, 0, 1, -1, -1);
    const llama_pos after = llama_memory_seq_pos_max(mem, 1);
    std::printf("seq 0 ends at %d; seq 1 ended at %d before, %d after\n", llama_memory_seq_pos_max(mem, 0), before, after);
    std::printf("llama_decode of seq 1's next token at position %d: %d\n", before + 1, decode_one(ctx, 1, before + 1));
    llama_free(ctx);
    llama_model_free(model);
    if (after != before) {
        std::printf("FINDING SHOWN: exit 1\n");
        return 1;
    }
    std::printf("not shown: exit 0\n");
    return 0;
}
