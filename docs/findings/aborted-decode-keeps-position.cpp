// An aborted llama_decode keeps a position it never computed: on a
// recurrent model (mamba), a decode the abort callback stops removes its
// ubatch from the memory with llama_memory_seq_rm, which a recurrent state
// refuses for a suffix, and the refusal is not checked: the sequence's last
// position is then the stopped token's, over a state that never took it.
// llama.h says to query llama_memory_seq_pos_max after an abort; a caller
// that goes on from it decodes over the wrong state. kvweld's known finding
// aborted-decode-keeps-position (targets/llamacpp/known_findings/b11434.json;
// its data sheet: aborted-decode-keeps-position.md).
//
// Build against a llama.cpp install (b11434):
//   g++ -std=c++17 aborted-decode-keeps-position.cpp -I$P/include -L$P/lib -lllama -lggml -lggml-base -Wl,-rpath,$P/lib
// Prints what the stopped call returned and left, and the next row against
// a fresh context's for the tokens the memory says it holds; exit 1 where
// they differ. (N_RS_SEQ, default 2: the context's rollback snapshots; 0
// shows it too.)
#include <ggml-backend.h>
#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
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

#ifndef N_RS_SEQ
#define N_RS_SEQ 2
#endif
static bool stop = false;
static bool abort_now(void*) { return stop; }

// The last row of `tokens` decoded into sequence 0 from position `pos0`, and llama_decode's result.
static int decode(llama_context* ctx, llama_pos pos0, const std::vector<llama_token>& tokens, std::vector<float>* row) {
    llama_batch batch = llama_batch_init(int32_t(tokens.size()), 0, 1);
    batch.n_tokens = int32_t(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        batch.token[i] = tokens[i];
        batch.pos[i] = pos0 + llama_pos(i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i + 1 == tokens.size();
    }
    const int rc = llama_decode(ctx, batch);
    if (rc == 0 && row) {
        const float* logits = llama_get_logits_ith(ctx, batch.n_tokens - 1);
        row->assign(logits, logits + 32);
    }
    llama_batch_free(batch);
    return rc;
}

static llama_context* context(llama_model* model, uint32_t n_rs_seq) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 1;
    cp.n_rs_seq = n_rs_seq;  // snapshots for a rollback of up to this many tokens
    cp.n_threads = cp.n_threads_batch = 1;
    cp.abort_callback = abort_now;
    return llama_init_from_model(model, cp);
}

int main() {
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);  // only this program's lines
    llama_backend_init();
    llama_model* model = mamba();
    if (model == nullptr) return 2;
    std::vector<float> want, got;
    llama_context* fresh = context(model, 0);
    decode(fresh, 0, {1, 2, 3, 4, 5}, &want);  // tokens 1..5 at once

    llama_context* ctx = context(model, N_RS_SEQ);
    llama_memory_t mem = llama_get_memory(ctx);
    decode(ctx, 0, {1, 2, 3}, nullptr);
    decode(ctx, 3, {4}, nullptr);
    stop = true;  // the next decode is stopped at its first check
    const int aborted = decode(ctx, 4, {5}, nullptr);
    stop = false;
    const llama_pos kept = llama_memory_seq_pos_max(mem, 0);
    // Go on from what the memory says it holds: token 5 again if the
    // aborted one is gone, else the next one, 6, against a fresh context's
    // row for the same tokens.
    int rc = 0;
    if (kept == 3) {
        rc = decode(ctx, 4, {5}, &got);
    } else {
        rc = decode(ctx, 5, {6}, &got);
        decode(fresh, 5, {6}, &want);
    }
    float diff = got.size() == want.size() && !want.empty() ? 0.f : 1e30f;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) diff = std::max(diff, std::fabs(got[i] - want[i]));
    std::printf("aborted decode of token 5 at position 4 returned %d; the sequence then ends at position %d; "
                "the next token's decode returned %d, its row against a fresh context's: %g\n", aborted, kept, rc, diff);
    llama_free(ctx);
    llama_free(fresh);
    llama_model_free(model);
    if (diff > 1e-3f) {
        std::printf("FINDING SHOWN: exit 1\n");
        return 1;
    }
    std::printf("not shown: exit 0\n");
    return 0;
}
