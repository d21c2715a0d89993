// Every memory llama.cpp ships, judged the one way that works for any
// architecture: a fresh prefill. Each model is made from metadata alone
// (targets/llamacpp/llama_arch_models.hpp: the plain KV cache, the
// sliding-window cache, the recurrent memory, the hybrid one). After every
// decode, each sequence's row must be the row of a second context that
// prefills, afresh, exactly the tokens this test's own log says the
// sequence holds; the log follows the memory calls as llama.h and the
// memories' source say they act (never what the engine says of itself).
// Both halves: the rows match where the log is right, and a log planted
// wrong (a refused rollback taken as done, a done one as refused) is told
// apart, so the comparison can fail.
#include "targets/llamacpp/llama_arch_models.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace kvweld::llamacpp {
namespace {

constexpr float kTolerance = 1e-4f;  // the data oracle's (measured here: 3e-8 between a step and a fresh prefill)
constexpr std::uint32_t kRollback = 4;  // n_rs_seq: per-token recurrent snapshots for a rollback

void quiet(ggml_log_level level, const char* text, void*) { if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr); }

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    if (a.size() != b.size() || a.empty()) return INFINITY;
    float worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

class MemoryKinds : public ::testing::TestWithParam<ArchModel> {
protected:
    static void SetUpTestSuite() {
        llama_log_set(quiet, nullptr);
        llama_backend_init();
    }
    void SetUp() override {
        model_ = arch_model(GetParam(), 7);
        ASSERT_NE(model_, nullptr) << GetParam().name;
        vocab_ = llama_vocab_n_tokens(llama_model_get_vocab(model_));
        engine_ = context(2, kRollback);
        fresh_ = context(1, 0);
        ASSERT_NE(engine_, nullptr);
        ASSERT_NE(fresh_, nullptr);
    }
    void TearDown() override {
        if (engine_) llama_free(engine_);
        if (fresh_) llama_free(fresh_);
        if (model_) llama_model_free(model_);
    }
    llama_context* context(std::uint32_t seqs, std::uint32_t rollback) const {
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = 128 * seqs;
        cp.n_batch = cp.n_ubatch = 64;
        cp.n_seq_max = seqs;
        cp.n_rs_seq = rollback;
        cp.n_threads = cp.n_threads_batch = 1;
        cp.type_k = cp.type_v = GGML_TYPE_F32;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        return llama_init_from_model(model_, cp);
    }
    llama_memory_t mem() const { return llama_get_memory(engine_); }

    // One decode call: each sequence's tokens from its logged length on,
    // its last row asked for. Logs the tokens; returns the rows by sequence.
    std::map<int, std::vector<float>> decode(const std::map<int, std::vector<llama_token>>& feed) {
        int n = 0;
        for (const auto& [seq, toks] : feed) n += int(toks.size());
        llama_batch b = llama_batch_init(n, 0, 1);
        std::map<int, int> row_of;
        for (const auto& [seq, toks] : feed) {
            for (std::size_t i = 0; i < toks.size(); ++i) {
                const int k = b.n_tokens++;
                b.token[k] = toks[i], b.pos[k] = llama_pos(log_[seq].size() + i);
                b.n_seq_id[k] = 1, b.seq_id[k][0] = seq, b.logits[k] = i + 1 == toks.size();
                if (b.logits[k]) row_of[seq] = k;
            }
            log_[seq].insert(log_[seq].end(), toks.begin(), toks.end());
        }
        const int rc = llama_decode(engine_, b);
        llama_batch_free(b);
        EXPECT_EQ(rc, 0) << "llama_decode";
        std::map<int, std::vector<float>> rows;
        for (const auto& [seq, k] : row_of) {
            const float* r = llama_get_logits_ith(engine_, k);
            if (r) rows[seq].assign(r, r + vocab_);
        }
        return rows;
    }
    // The last row of a fresh prefill of `tokens` at positions 0..n-1.
    std::vector<float> fresh_row(const std::vector<llama_token>& tokens) {
        llama_memory_clear(llama_get_memory(fresh_), true);
        llama_batch b = llama_batch_init(int(tokens.size()), 0, 1);
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            b.token[i] = tokens[i], b.pos[i] = llama_pos(i), b.n_seq_id[i] = 1, b.seq_id[i][0] = 0;
            b.logits[i] = i + 1 == tokens.size();
        }
        b.n_tokens = int(tokens.size());
        const int rc = llama_decode(fresh_, b);
        llama_batch_free(b);
        if (rc != 0) return {};
        const float* r = llama_get_logits_ith(fresh_, -1);
        return r ? std::vector<float>(r, r + vocab_) : std::vector<float>{};
    }
    // Every row of `rows` against a fresh prefill of its sequence's log.
    void expect_fresh(const std::map<int, std::vector<float>>& rows, const char* when) {
        for (const auto& [seq, row] : rows)
            EXPECT_LE(max_diff(row, fresh_row(log_[seq])), kTolerance)
                << GetParam().name << ": seq " << seq << " " << when << " (holds " << log_[seq].size() << " tokens)";
    }
    llama_token token(int i) const { return llama_token((i * 37 + 11) % vocab_); }

    llama_model* model_ = nullptr;
    llama_context* engine_ = nullptr;
    llama_context* fresh_ = nullptr;
    int vocab_ = 0;
    std::map<int, std::vector<llama_token>> log_;
};

TEST_P(MemoryKinds, EveryRowIsAFreshPrefillsRow) {
    expect_fresh(decode({{0, {token(1), token(2), token(3), token(4), token(5), token(6)}},
                         {1, {token(7), token(8), token(9), token(10)}}}),
                 "after the prompts");
    for (int step = 0; step < 10; ++step)
        expect_fresh(decode({{0, {token(20 + step)}}, {1, {token(40 + step)}}}), "after a step of both");
}

// A rollback (speculative decoding's reject path): three drafts fed in one
// call, the last two removed. The plain and sliding-window caches drop
// cells; the recurrent memory keeps one state per sequence and refuses a
// partial removal unless the architecture keeps per-token snapshots
// (llm_arch_supports_rs_rollback: lfm2 yes, mamba no) and the rollback is
// within n_rs_seq (llama_memory_recurrent::seq_rm). A refusal must leave
// the sequence as it was.
TEST_P(MemoryKinds, ASuffixIsRolledBackOrRefusedWhole) {
    decode({{0, {token(1), token(2), token(3), token(4), token(5), token(6)}}});
    decode({{0, {token(7), token(8), token(9)}}});
    const std::size_t held = log_[0].size();
    const MemoryKind kind = GetParam().memory;
    const bool snapshots = std::string(GetParam().arch) == "lfm2";  // in llm_arch_supports_rs_rollback
    const bool may = kind == MemoryKind::kv || kind == MemoryKind::sliding_window || snapshots;
    ASSERT_EQ(llama_n_rs_seq(engine_), snapshots ? kRollback : 0u)
        << "n_rs_seq is clamped to 0 where the architecture keeps no snapshots (llama-context.cpp:108)";
    const bool removed = llama_memory_seq_rm(mem(), 0, llama_pos(held - 2), -1);
    EXPECT_EQ(removed, may) << GetParam().name;
    std::vector<llama_token> right = log_[0], wrong = log_[0];
    (removed ? right : wrong).resize(held - 2);
    log_[0] = right;
    const auto rows = decode({{0, {token(50)}}});
    expect_fresh(rows, removed ? "after a rollback of 2" : "after a refused rollback");
    // The planted half: the log that took the other answer is told apart.
    wrong.push_back(token(50));
    EXPECT_GT(max_diff(rows.at(0), fresh_row(wrong)), kTolerance)
        << GetParam().name << ": a stale state would pass unseen";
}

// Whole sequences moved: a copy onto an empty sequence, and a sequence's
// state saved and loaded into another; each then decodes as its source.
TEST_P(MemoryKinds, ACopyAndAStateLoadDecodeAsTheirSource) {
    decode({{0, {token(1), token(2), token(3), token(4), token(5)}}});
    decode({{0, {token(6)}}});
    llama_memory_seq_cp(mem(), 0, 1, -1, -1);
    log_[1] = log_[0];
    expect_fresh(decode({{0, {token(30)}}, {1, {token(31)}}}), "after a copy");

    std::vector<std::uint8_t> state(llama_state_seq_get_size(engine_, 0));
    ASSERT_EQ(llama_state_seq_get_data(engine_, state.data(), state.size(), 0), state.size());
    ASSERT_TRUE(llama_memory_seq_rm(mem(), 1, -1, -1));
    ASSERT_EQ(llama_state_seq_set_data(engine_, state.data(), state.size(), 1), state.size());
    log_[1] = log_[0];
    expect_fresh(decode({{0, {token(32)}}, {1, {token(33)}}}), "after a state load");
}

INSTANTIATE_TEST_SUITE_P(EveryKind, MemoryKinds, ::testing::ValuesIn(kArchModels),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvweld::llamacpp
