// kvweld's GGUF export, loaded by llama.cpp: llama.cpp's logits for every
// position must equal kvweld's reference forward over the same weights
// (logit_error <= 1e-4), with F32 weights and KV and flash attention off.
#include "engine/gguf.hpp"
#include "engine/reference.hpp"
#include "util/rng.hpp"

#include <gtest/gtest.h>
#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

namespace kvweld {
namespace {

constexpr double kTolerance = 1e-4;

struct ModelDeleter {
    void operator()(llama_model* m) const { llama_model_free(m); }
};
struct ContextDeleter {
    void operator()(llama_context* c) const { llama_free(c); }
};

void quiet(ggml_log_level, const char*, void*) {}

class LlamaCpp : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        llama_log_set(quiet, nullptr);
        llama_backend_init();
    }

    // Loads `model` into llama.cpp through a GGUF file and decodes `n`
    // tokens one at a time; returns the worst logit_error against the
    // reference forward over `reference` (the same model, unless a test
    // checks that a difference is seen).
    static double worst_error(const Model& model, const Model& reference, int n, std::uint64_t seed,
                              int* reused = nullptr) {
        const std::string path = (std::filesystem::temp_directory_path() /
                                  ("kvweld-" + std::to_string(::getpid()) + "-" + std::to_string(seed) + ".gguf"))
                                     .string();
        save_gguf(model, path);
        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        std::unique_ptr<llama_model, ModelDeleter> lm(llama_model_load_from_file(path.c_str(), mp));
        std::filesystem::remove(path);
        EXPECT_NE(lm, nullptr) << "llama.cpp refused the GGUF file";
        if (!lm) return 1e9;
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = std::uint32_t(model.config().max_seq_len);
        cp.n_batch = cp.n_ubatch = 8;
        cp.n_threads = cp.n_threads_batch = 1;
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;  // on by default on CPU; moves logits by ~5e-3
        cp.no_perf = false;
        std::unique_ptr<llama_context, ContextDeleter> ctx(llama_init_from_model(lm.get(), cp));
        EXPECT_NE(ctx, nullptr);
        if (!ctx) return 1e9;

        ReferenceKv shadow(model.config());
        Rng rng(seed);
        const int vocab = model.config().vocab;
        double worst = 0.0;
        for (int pos = 0; pos < n; ++pos) {
            llama_token token = llama_token(rng.below(std::uint64_t(vocab)));
            EXPECT_EQ(llama_decode(ctx.get(), llama_batch_get_one(&token, 1)), 0) << "position " << pos;
            const float* got = llama_get_logits_ith(ctx.get(), -1);
            const std::vector<float> want = reference_forward(reference, shadow, token, pos);
            worst = std::max(worst, logit_error(std::span<const float>(got, std::size_t(vocab)), want));
        }
        if (reused) *reused = llama_perf_context(ctx.get()).n_reused;
        return worst;
    }
};

TEST_F(LlamaCpp, TinyModelMatchesTheReference) {
    const Model model = Model::random(config_by_name("tiny"), 5);
    int reused = 0;
    const double err = worst_error(model, model, 200, 1, &reused);
    std::printf("tiny: 200 positions, worst logit_error %.3g, llama.cpp reused its graph %d times\n", err, reused);
    EXPECT_LE(err, kTolerance);
    EXPECT_GT(reused, 100);  // single-sequence decoding keeps llama.cpp's graph
}

TEST_F(LlamaCpp, Stories15mDimsMatchTheReference) {
    const Model model = Model::random(config_by_name("stories15m"), 6);
    const double err = worst_error(model, model, 24, 2);
    std::printf("stories15m dims: 24 positions, worst logit_error %.3g\n", err);
    EXPECT_LE(err, kTolerance);
}

// The other half: the comparison can fail. llama.cpp running the exported
// weights is told apart from a reference whose last layer's output
// projection differs by 1%.
TEST_F(LlamaCpp, DifferentWeightsAreToldApart) {
    const Model exported = Model::random(config_by_name("tiny"), 7);
    Model other = Model::random(config_by_name("tiny"), 7);
    const LayerWeights last = other.layer(other.config().n_layers - 1);
    const auto offset = static_cast<std::size_t>(last.wo.data() - other.all_weights().data());
    for (float& w : other.all_weights_mut().subspan(offset, last.wo.size())) w *= 1.01f;
    const double err = worst_error(exported, other, 16, 3);
    std::printf("1%% change of one matrix: worst logit_error %.3g\n", err);
    EXPECT_GT(err, 10 * kTolerance);
}

// With llama.cpp's dummy test vocabulary (Vocab::test) the file loads with
// one token per id and a token's text is its id in hex (what llama-server
// returns for a generated token), with no BOS to add; kvweld reads the file
// back to the same weights. The other half: without it there is no vocabulary.
TEST_F(LlamaCpp, TestVocabularyLoadsAndDetokenizes) {
    const Model model = Model::random(config_by_name("tiny"), 8);
    for (const Vocab vocab : {Vocab::test, Vocab::none}) {
        const bool test = vocab == Vocab::test;
        const std::string path =
            (std::filesystem::temp_directory_path() / ("kvweld-vocab-" + std::to_string(::getpid()) + ".gguf")).string();
        save_gguf(model, path, vocab);
        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        std::unique_ptr<llama_model, ModelDeleter> lm(llama_model_load_from_file(path.c_str(), mp));
        const Model back = load_gguf(path);
        std::filesystem::remove(path);
        ASSERT_NE(lm, nullptr) << "llama.cpp refused the GGUF file (test vocabulary " << test << ")";
        const llama_vocab* v = llama_model_get_vocab(lm.get());
        EXPECT_EQ(llama_vocab_type(v), test ? LLAMA_VOCAB_TYPE_TEST : LLAMA_VOCAB_TYPE_NONE);
        EXPECT_EQ(llama_vocab_n_tokens(v), model.config().vocab);
        EXPECT_EQ(llama_vocab_bos(v), LLAMA_TOKEN_NULL);
        if (test) {
            char piece[16];
            const int n = llama_token_to_piece(v, 26, piece, sizeof piece, 0, false);
            EXPECT_EQ(std::string(piece, std::size_t(std::max(n, 0))), "1a");
        }
        const auto a = model.all_weights(), b = back.all_weights();
        EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << "test vocabulary " << test;
    }
}

}  // namespace
}  // namespace kvweld
