// llama.cpp decoding the same weights as kvweld (through a GGUF export), one
// token at a time, for the side-by-side benchmarks. Only built where
// llama.cpp is (KVWELD_HAVE_LLAMA).
#pragma once

#include "engine/error.hpp"
#include "engine/gguf.hpp"

#include <llama.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <unistd.h>

namespace kvweld::bench {

class LlamaRunner {
public:
    LlamaRunner(const Model& model, int threads) : vocab_(model.config().vocab), n_ctx_(model.config().max_seq_len) {
        static const bool init = [] {
            llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
            llama_backend_init();
            return true;
        }();
        (void)init;
        const std::string path =
            (std::filesystem::temp_directory_path() / ("kvweld-bench-" + std::to_string(::getpid()) + ".gguf")).string();
        save_gguf(model, path);
        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        model_.reset(llama_model_load_from_file(path.c_str(), mp));
        std::filesystem::remove(path);
        require(model_ != nullptr, "llama.cpp refused the GGUF export");
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = std::uint32_t(n_ctx_);
        cp.n_batch = cp.n_ubatch = 8;
        cp.n_threads = cp.n_threads_batch = threads;
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        cp.no_perf = false;
        ctx_.reset(llama_init_from_model(model_.get(), cp));
        require(ctx_ != nullptr, "llama.cpp: no context");
    }

    // Decodes the next token; wraps to position 0 when the context is full.
    std::span<const float> decode(int token) {
        if (pos_ == n_ctx_) {
            llama_memory_clear(llama_get_memory(ctx_.get()), true);
            pos_ = 0;
        }
        llama_token t = token;
        require(llama_decode(ctx_.get(), llama_batch_get_one(&t, 1)) == 0, "llama_decode failed");
        ++pos_;
        return {llama_get_logits_ith(ctx_.get(), -1), std::size_t(vocab_)};
    }
    int reused() const { return llama_perf_context(ctx_.get()).n_reused; }

private:
    struct ModelDeleter {
        void operator()(llama_model* m) const { llama_model_free(m); }
    };
    struct ContextDeleter {
        void operator()(llama_context* c) const { llama_free(c); }
    };
    int vocab_, n_ctx_, pos_ = 0;
    std::unique_ptr<llama_model, ModelDeleter> model_;
    std::unique_ptr<llama_context, ContextDeleter> ctx_;
};

}  // namespace kvweld::bench
