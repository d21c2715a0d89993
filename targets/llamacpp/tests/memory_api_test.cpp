// llama.h's memory calls that kvweld's plugin ABI has no op for, checked
// against kvweld's reference forward in each KV layout: llama_memory_seq_keep,
// llama_memory_seq_rm over every sequence (seq_id -1), llama_memory_seq_div
// and a whole context's state (llama_state_get_data / llama_state_set_data,
// what a program's prompt cache saves). Each test checks both halves: what
// the call must change, and that every sequence's next rows are the
// reference's over what it must keep.
#include "engine/reference.hpp"
#include "targets/llamacpp/tests/llama_test_model.hpp"

#include <gtest/gtest.h>
#include <llama.h>

#include <memory>
#include <optional>
#include <vector>

namespace kvweld {
namespace {

constexpr int kSeqs = 3, kCtx = 64;

void no_log(ggml_log_level, const char*, void*) {}

class MemoryApi : public ::testing::TestWithParam<bool> {  // kv_unified
protected:
    static void SetUpTestSuite() {
        llama_log_set(no_log, nullptr);
        llama_backend_init();
    }
    void SetUp() override {
        lm_ = load_in_llama(model_, "memory");
        ASSERT_NE(lm_, nullptr);
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = kCtx * kSeqs;
        cp.n_seq_max = kSeqs;
        cp.n_batch = cp.n_ubatch = 64;
        cp.n_threads = cp.n_threads_batch = 1;
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        cp.kv_unified = GetParam();
        ctx_ = llama_init_from_model(lm_, cp);
        ASSERT_NE(ctx_, nullptr);
        for (auto& s : shadow_) s.emplace(model_.config());
    }
    void TearDown() override {
        if (ctx_) llama_free(ctx_);
        if (lm_) llama_model_free(lm_);
    }
    llama_memory_t mem() const { return llama_get_memory(ctx_); }
    int held(int seq) const { return int(llama_memory_seq_pos_max(mem(), seq)) + 1; }

    // Feeds `n` tokens to `seq` from position `pos` in one call; returns the
    // worst logit_error of its rows against the reference over the
    // sequence's shadow (which the tokens extend).
    double feed(int seq, int pos, int n) {
        llama_batch b = llama_batch_init(n, 0, 1);
        for (int i = 0; i < n; ++i) {
            b.token[i] = (seq * 11 + (pos + i) * 7) % model_.config().vocab;
            b.pos[i] = pos + i;
            b.n_seq_id[i] = 1;
            b.seq_id[i][0] = seq;
            b.logits[i] = 1;
        }
        b.n_tokens = n;
        const int rc = llama_decode(ctx_, b);
        double worst = rc == 0 ? 0.0 : 1e9;
        for (int i = 0; rc == 0 && i < n; ++i) {
            const std::vector<float> want = reference_forward(model_, *shadow_[std::size_t(seq)], b.token[i], pos + i);
            const float* got = llama_get_logits_ith(ctx_, i);
            worst = std::max(worst, logit_error(std::span<const float>(got, std::size_t(model_.config().vocab)), want));
        }
        llama_batch_free(b);
        return worst;
    }
    void prefill() {
        for (int s = 0; s < kSeqs; ++s) EXPECT_LE(feed(s, 0, 6 + 2 * s), kDataTolerance) << "sequence " << s;
    }

    const Model model_ = Model::random(config_by_name("tiny"), 41);
    llama_model* lm_ = nullptr;
    llama_context* ctx_ = nullptr;
    std::optional<ReferenceKv> shadow_[kSeqs];
};

// seq_keep: llama.h says it "removes all tokens that do not belong to the
// specified sequence". With one cache (kv_unified=1) every other sequence
// is emptied, the kept one decodes on, and an emptied one starts again
// from position 0 with nothing of its old rows. With one KV stream per
// sequence (kv_unified=0, llama_context_default_params') it removes
// nothing: llama_kv_cache::seq_keep scans the kept sequence's own stream
// only (src/llama-kv-cache.cpp:543-567), and every other sequence lives in
// a stream of its own. A finding of llama.cpp (seq-keep-other-streams,
// docs/FINDINGS.md); the test pins it: when a release fixes it, it fails.
TEST_P(MemoryApi, SeqKeepEmptiesEveryOtherSequence) {
    prefill();
    llama_memory_seq_keep(mem(), 1);
    EXPECT_EQ(held(1), 8);
    EXPECT_LE(feed(1, 8, 2), kDataTolerance);
    if (!GetParam()) {  // the finding: the others hold what they held
        EXPECT_EQ(held(0), 6);
        EXPECT_EQ(held(2), 10);
        EXPECT_LE(feed(0, 6, 1), kDataTolerance);  // and decode on over it, as if kept
        return;
    }
    EXPECT_EQ(held(0), 0);
    EXPECT_EQ(held(2), 0);
    shadow_[0].emplace(model_.config());
    EXPECT_LE(feed(0, 0, 3), kDataTolerance);
}

// seq_rm over every sequence (-1): the range goes from each, the rest stays.
TEST_P(MemoryApi, SeqRmOfEverySequenceCutsEachAtThePosition) {
    prefill();
    llama_memory_seq_rm(mem(), -1, 4, -1);
    for (int s = 0; s < kSeqs; ++s) EXPECT_EQ(held(s), 4) << "sequence " << s;
    for (int s = 0; s < kSeqs; ++s) EXPECT_LE(feed(s, 4, 2), kDataTolerance) << "sequence " << s;
}

// seq_div: positions [0, 8) of a sequence divided by 2 (two cells at each
// position, the K rotated to it); it decodes on from the next position.
// The other sequences keep theirs.
TEST_P(MemoryApi, SeqDivDividesOneSequencesPositions) {
    prefill();
    ASSERT_TRUE(llama_memory_can_shift(mem()));
    llama_memory_seq_div(mem(), 1, 0, 8, 2);
    EXPECT_EQ(held(1), 4);
    EXPECT_EQ(llama_memory_seq_pos_min(mem(), 1), 0);
    EXPECT_EQ(held(0), 6);
    EXPECT_EQ(held(2), 10);
    EXPECT_LE(feed(0, 6, 1), kDataTolerance);
    EXPECT_LE(feed(2, 10, 1), kDataTolerance);
    llama_token token = 3;
    llama_batch b = llama_batch_get_one(&token, 1);
    llama_pos pos = 4;
    llama_seq_id seq = 1, *seqs = &seq;
    int32_t n_seq = 1;
    int8_t out = 1;
    b.pos = &pos;
    b.n_seq_id = &n_seq;
    b.seq_id = &seqs;
    b.logits = &out;
    EXPECT_EQ(llama_decode(ctx_, b), 0);
    EXPECT_EQ(held(1), 5);
}

// A whole context's state: saved, the memory cleared, loaded back: every
// sequence holds what it held and decodes on as the reference says. The
// other half: cleared and not loaded, nothing is held. A state cut short is
// refused (0 bytes read).
TEST_P(MemoryApi, AWholeContextStateLoadsBackEverySequence) {
    prefill();
    std::vector<std::uint8_t> state(llama_state_get_size(ctx_));
    ASSERT_EQ(llama_state_get_data(ctx_, state.data(), state.size()), state.size());
    llama_memory_clear(mem(), true);
    for (int s = 0; s < kSeqs; ++s) EXPECT_EQ(held(s), 0);
    ASSERT_EQ(llama_state_set_data(ctx_, state.data(), state.size()), state.size());
    for (int s = 0; s < kSeqs; ++s) EXPECT_EQ(held(s), 6 + 2 * s) << "sequence " << s;
    for (int s = 0; s < kSeqs; ++s) EXPECT_LE(feed(s, 6 + 2 * s, 2), kDataTolerance) << "sequence " << s;
    EXPECT_EQ(llama_state_set_data(ctx_, state.data(), state.size() / 2), 0u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, MemoryApi, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "unified" : "per_sequence"; });

}  // namespace
}  // namespace kvweld
