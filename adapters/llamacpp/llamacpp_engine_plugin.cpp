// llama.cpp behind kvweld's plugin ABI (include/kvweld/engine_abi.h).
// Sequences are llama.cpp sequence ids in one context (F32 weights from the
// harness's GGUF file, F32 KV, flash attention off); a decode is one
// llama_decode of the whole batch; truncate, clear and copy are llama.cpp's
// memory operations. The counters are llama.cpp's own graph reuse count
// (llama_perf_context().n_reused, per graph computed) and the decode calls
// beyond it; llama.cpp may split one batch into several graphs, so `builds`
// is a lower bound until the accounting rule for llama.cpp exists.
#include "adapters/abi_guard.hpp"
#include "kvweld/engine_abi.h"

#include <llama.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <vector>

struct kvweld_engine {
    llama_model* model = nullptr;
    llama_context* ctx = nullptr;
    int n_ctx = 0, n_seq_max = 0, vocab = 0;
    std::vector<int> len;    // per sequence: positions held, -1 when closed
    std::uint64_t calls = 0; // llama_decode calls
    ~kvweld_engine() {
        if (ctx) llama_free(ctx);
        if (model) llama_model_free(model);
    }
};

namespace {

template <class... Parts>
void require(bool cond, const Parts&... parts) {
    if (cond) return;
    std::string msg;
    ((msg += [&] {
         if constexpr (std::is_arithmetic_v<Parts>) return std::to_string(parts);
         else return std::string(parts);
     }()),
     ...);
    throw std::runtime_error(msg);
}

using kvweld::abi::guarded;

int& len_of(kvweld_engine* e, int32_t seq) {
    require(seq >= 0 && seq < e->n_seq_max, "sequence ", seq, " out of range 0..", e->n_seq_max - 1);
    require(e->len[std::size_t(seq)] >= 0, "sequence ", seq, " is not open");
    return e->len[std::size_t(seq)];
}

llama_memory_t memory(kvweld_engine* e) { return llama_get_memory(e->ctx); }

int create(const kvweld_engine_options* o, kvweld_engine** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        static const bool init = [] {
            llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
            llama_backend_init();
            return true;
        }();
        (void)init;
        require(o && o->model_path, "no options or model path");
        require(!o->faults || !*o->faults, "the llama.cpp plugin has no fault switches (asked for ", o->faults ? o->faults : "", ")");
        require(o->n_ctx >= 1 && o->n_seq_max >= 1 && o->n_seq_max <= 256, "n_ctx ", o->n_ctx, ", n_seq_max ",
                o->n_seq_max, ": out of range");
        auto e = std::make_unique<kvweld_engine>();
        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        e->model = llama_model_load_from_file(o->model_path, mp);
        require(e->model != nullptr, "llama.cpp cannot load ", o->model_path);
        llama_context_params cp = llama_context_default_params();
        // Not unified (llama.cpp's default): each sequence has n_ctx cells of its own.
        cp.n_ctx = std::uint32_t(o->n_ctx) * std::uint32_t(o->n_seq_max);
        cp.n_seq_max = std::uint32_t(o->n_seq_max);
        cp.n_batch = cp.n_ubatch = 512;
        cp.n_threads = cp.n_threads_batch = std::max(1, o->threads);
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        cp.no_perf = false;
        e->ctx = llama_init_from_model(e->model, cp);
        require(e->ctx != nullptr, "llama.cpp: no context for n_ctx ", int(cp.n_ctx));
        e->n_ctx = o->n_ctx;
        e->n_seq_max = o->n_seq_max;
        e->vocab = llama_vocab_n_tokens(llama_model_get_vocab(e->model));
        e->len.assign(std::size_t(o->n_seq_max), -1);
        *out = e.release();
    });
}

void destroy(kvweld_engine* e) { delete e; }
int32_t vocab(const kvweld_engine* e) { return e->vocab; }

int open_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(seq >= 0 && seq < e->n_seq_max, "sequence ", seq, " out of range 0..", e->n_seq_max - 1);
        require(e->len[std::size_t(seq)] < 0, "sequence ", seq, " is already open");
        llama_memory_seq_rm(memory(e), seq, -1, -1);
        e->len[std::size_t(seq)] = 0;
    });
}

int close_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        len_of(e, seq);
        llama_memory_seq_rm(memory(e), seq, -1, -1);
        e->len[std::size_t(seq)] = -1;
    });
}

int decode(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, int32_t n, float* logits, char* err,
           size_t err_len) {
    return guarded(err, err_len, [&] {
        require(n >= 1 && n <= 512, "a batch of ", n, " pairs: must be 1..512");
        std::vector<int> next(e->len);
        llama_batch batch = llama_batch_init(n, 0, 1);
        struct Free {
            llama_batch& b;
            ~Free() { llama_batch_free(b); }
        } free_batch{batch};
        for (int32_t i = 0; i < n; ++i) {
            len_of(e, seqs[i]);
            require(tokens[i] >= 0 && tokens[i] < e->vocab, "token ", tokens[i], " out of range: vocab is ", e->vocab);
            int& pos = next[std::size_t(seqs[i])];
            require(pos < e->n_ctx, "sequence ", seqs[i], " is full: ", e->n_ctx, " positions");
            batch.token[i] = tokens[i];
            batch.pos[i] = pos++;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = seqs[i];
            batch.logits[i] = 1;
        }
        batch.n_tokens = n;
        const int32_t rc = llama_decode(e->ctx, batch);
        require(rc == 0, "llama_decode returned ", rc);
        ++e->calls;
        e->len = next;
        for (int32_t i = 0; i < n; ++i)
            std::memcpy(logits + std::size_t(i) * std::size_t(e->vocab), llama_get_logits_ith(e->ctx, i),
                        std::size_t(e->vocab) * sizeof(float));
    });
}

int truncate(kvweld_engine* e, int32_t seq, int32_t n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        int& len = len_of(e, seq);
        require(n >= 0 && n <= len, "truncate_to(", n, "): must be in 0..", len);
        require(llama_memory_seq_rm(memory(e), seq, n, -1), "llama_memory_seq_rm refused");
        len = n;
    });
}

int clear_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        int& len = len_of(e, seq);
        llama_memory_seq_rm(memory(e), seq, -1, -1);
        len = 0;
    });
}

int clear_all(kvweld_engine* e, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        llama_memory_clear(memory(e), true);
        for (int& len : e->len)
            if (len > 0) len = 0;
    });
}

int copy_seq(kvweld_engine* e, int32_t src, int32_t dst, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const int n = len_of(e, src);
        int& to = len_of(e, dst);
        llama_memory_seq_rm(memory(e), dst, -1, -1);
        llama_memory_seq_cp(memory(e), src, dst, -1, -1);
        to = n;
    });
}

int counters(const kvweld_engine* e, kvweld_engine_counters* out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto reused = std::uint64_t(std::max(0, llama_perf_context(e->ctx).n_reused));
        *out = {e->calls - std::min(e->calls, reused), reused};
    });
}

constexpr kvweld_engine_api kApi = {
    KVWELD_ENGINE_ABI_VERSION, "llamacpp", "gguf", KVWELD_CAP_COPY_SEQ | KVWELD_CAP_PLAN_COUNTERS,
    create, destroy, vocab, open_seq, close_seq, decode, truncate, clear_seq, clear_all, copy_seq, counters,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) { return &kApi; }
