// The held plan decodes exactly what the reference forward computes.
#include "engine/checkpoint.hpp"
#include "engine/decode_session.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include <filesystem>

namespace kvweld {
namespace {

using testing::kCpuTolerance;
using testing::Shadow;

constexpr int kPositions = 220;

// Decodes kPositions tokens with one held plan and compares every step's
// logits with the reference. Returns the worst difference.
double decode_against_reference(const Model& model) {
    auto cache = KvCache::with_capacity(model.config());
    DecodeSession session;
    Shadow shadow(model);
    double worst = 0.0;
    for (int token : testing::random_tokens(kPositions, model.config().vocab, 11)) {
        const std::vector<float> expected = shadow.step(token);
        const std::span<const float> got = session.decode(model, cache, token);
        worst = std::max(worst, logit_error(got, expected));
    }
    EXPECT_EQ(cache.cached_len(), kPositions);
    EXPECT_EQ(session.counters().builds, 1u);
    EXPECT_EQ(session.counters().kept, kPositions - 1u);
    EXPECT_EQ(session.counters().rebinds, 0u);
    return worst;
}

struct Variant {
    const char* name;
    Family family;
    int n_kv_heads;
};

// Names the variant in test output instead of dumping its bytes.
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class HeldPlanDecode : public ::testing::TestWithParam<Variant> {};

TEST_P(HeldPlanDecode, MatchesReferenceOverManyPositions) {
    ModelConfig cfg = tiny_config(GetParam().family);
    cfg.n_kv_heads = GetParam().n_kv_heads;
    const Model model = Model::random(cfg, 42);
    const double worst = decode_against_reference(model);
    EXPECT_LE(worst, kCpuTolerance);
    RecordProperty("max_abs_diff", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Families, HeldPlanDecode,
                         ::testing::Values(Variant{"llama_gqa", Family::llama, 2},
                                           Variant{"llama_mha", Family::llama, 4},
                                           Variant{"qwen3_gqa", Family::qwen3, 1},
                                           Variant{"qwen3_mha", Family::qwen3, 4}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(HeldPlanDecode, Qwen3WithQDimOtherThanDim) {
    ModelConfig cfg = tiny_config(Family::qwen3);
    cfg.dim = 24;
    EXPECT_LE(decode_against_reference(Model::random(cfg, 5)), kCpuTolerance);
}

TEST(HeldPlanDecode, LoadedLlama2cCheckpointMatchesReference) {
    const std::string path =
        (std::filesystem::temp_directory_path() / "kvweld_decode_ckpt.bin").string();
    save_llama2c(Model::random(tiny_config(), 99), path);
    const Model loaded = load_llama2c(path);
    std::filesystem::remove(path);
    EXPECT_LE(decode_against_reference(loaded), kCpuTolerance);
}

TEST(HeldPlanDecode, SharedClassifierCheckpointMatchesReference) {
    Model m = Model::zeros(tiny_config(), /*shared_classifier=*/true);
    Rng rng(4);
    for (float& w : m.all_weights_mut()) w = rng.symmetric(0.4f);
    const Model loaded = parse_llama2c(serialize_llama2c(m));
    EXPECT_LE(decode_against_reference(loaded), kCpuTolerance);
}

TEST(HeldPlanDecode, ReplanEveryTokenBuildsEachStepAndAgrees) {
    const Model model = Model::random(tiny_config(), 8);
    auto held_cache = KvCache::with_capacity(model.config());
    auto replan_cache = KvCache::with_capacity(model.config());
    DecodeSession held;
    DecodeSession replan({.replan_every_token = true});
    for (int token : testing::random_tokens(30, model.config().vocab, 2)) {
        const std::span<const float> a = held.decode(model, held_cache, token);
        const std::vector<float> a_copy(a.begin(), a.end());
        EXPECT_EQ(logit_error(a_copy, replan.decode(model, replan_cache, token)), 0.0);
    }
    EXPECT_EQ(replan.counters().builds, 30u);
    EXPECT_EQ(replan.counters().by(BuildReason::replan), 29u);
    EXPECT_EQ(held.counters().builds, 1u);
}

// Rows and heads are split among threads in fixed blocks, each computed the
// same way whatever the count: logits are bitwise identical for 1..5
// threads, over odd sizes too (rows not a multiple of four or of the count).
TEST(Decode, LogitsAreBitwiseIdenticalForEveryThreadCount) {
    ModelConfig odd = tiny_config();
    odd.vocab = 67;
    odd.ffn_dim = 45;
    for (const ModelConfig& cfg : {tiny_config(), tiny_config(Family::qwen3), odd}) {
        const Model model = Model::random(cfg, 12);
        std::vector<std::vector<float>> one;
        for (int threads = 1; threads <= 5; ++threads) {
            KvCache cache = KvCache::with_capacity(cfg);
            DecodeSession session({.threads = threads});
            int pos = 0;
            for (int t : testing::random_tokens(40, cfg.vocab, 13)) {
                const std::span<const float> got = session.decode(model, cache, t);
                if (threads == 1) {
                    one.emplace_back(got.begin(), got.end());
                } else {
                    ASSERT_EQ(std::memcmp(got.data(), one[std::size_t(pos)].data(), got.size_bytes()), 0)
                        << threads << " threads, position " << pos;
                }
                ++pos;
            }
        }
    }
    EXPECT_THROW(DecodeSession({.threads = 0}), Error);
}

// A thread-count change between decodes (llama.cpp's llama_set_n_threads)
// is step data, both halves: the held plan is kept, and its rows stay
// bitwise those of a session that ran at one thread count throughout; a
// bad count is refused and changes nothing. Under threads_in_key the
// change drops the plan (the next decode builds one).
TEST(Decode, AThreadCountChangeKeepsThePlanAndItsRows) {
    const Model model = Model::random(tiny_config(), 12);
    const std::vector<int> tokens = testing::random_tokens(30, model.config().vocab, 14);
    KvCache fixed_cache = KvCache::with_capacity(model.config()), cache = KvCache::with_capacity(model.config());
    DecodeSession fixed, changing;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (i % 7 == 3) changing.set_threads(1 + int((i / 7 + 1) % 3));  // 2, 3, 1, 2
        const std::span<const float> want = fixed.decode(model, fixed_cache, tokens[i]);
        const std::span<const float> got = changing.decode(model, cache, tokens[i]);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size_bytes()), 0) << "position " << i;
    }
    EXPECT_EQ(changing.counters().builds, 1u);
    EXPECT_EQ(changing.counters().kept, tokens.size() - 1);
    const PlanSerial held = changing.plan_serial();
    EXPECT_THROW(changing.set_threads(0), Error);
    EXPECT_THROW(changing.set_threads(257), Error);
    EXPECT_EQ(changing.options().threads, 2);
    EXPECT_EQ(changing.plan_serial(), held);
    if (!kFaultsCompiled) return;
    const ScopedFaults on(testing::only(Fault::threads_in_key));
    changing.set_threads(1);
    changing.decode(model, cache, 3);
    EXPECT_EQ(changing.counters().builds, 2u) << "threads_in_key must rebuild after a thread-count change";
}

// Causal attention off (llama_set_causal_attn(ctx, false)): a span of one
// sequence's tokens through a held plan attends to itself whole, as the
// reference's span does; its first row is not the causal one, and the
// reference's causal span is, bit for bit, the same as one token at a time.
// The plan is kept across the switch (the mask is step data).
TEST(Decode, ANonCausalSpanAttendsToItselfWholeAndMatchesTheReference) {
    const Model model = Model::random(tiny_config(), 21);
    const std::vector<int> tokens = testing::random_tokens(9, model.config().vocab, 5);
    const std::span<const int> head(tokens.data(), 4), span(tokens.data() + 4, 5);
    KvCache cache = KvCache::with_capacity(model.config());
    DecodeSession session;
    ReferenceKv kv(model.config());
    for (int i = 0; i < 4; ++i) {
        const std::vector<float> want = reference_forward(model, kv, head[std::size_t(i)], i);
        EXPECT_LE(logit_error(session.decode(model, cache, head[std::size_t(i)]), want), kCpuTolerance);
    }
    ReferenceKv causal_kv = kv, one_kv = kv;
    const auto want = reference_forward_span(model, kv, span, 4, Adapters::none(), false);
    const auto causal = reference_forward_span(model, causal_kv, span, 4, Adapters::none(), true);
    for (std::size_t i = 0; i < span.size(); ++i)
        EXPECT_EQ(causal[i], reference_forward(model, one_kv, span[i], 4 + int(i))) << "position " << 4 + i;
    EXPECT_GT(logit_error(causal[0], want[0]), 1e-3) << "the first token must see the later ones";
    std::size_t rows = 0;
    session.decode_span(model, cache, span, Adapters::none(), false, [&](std::size_t i, std::span<const float> got) {
        EXPECT_LE(logit_error(got, want[i]), kCpuTolerance) << "span token " << i;
        ++rows;
    });
    EXPECT_EQ(rows, span.size());
    EXPECT_EQ(cache.cached_len(), 9);
    EXPECT_EQ(session.counters().builds, 1u);
    EXPECT_EQ(session.counters().kept, 8u);
    // A span past the capacity is refused whole.
    const std::vector<int> too_many(std::size_t(model.config().max_seq_len), 1);
    EXPECT_THROW(session.decode_span(model, cache, too_many, Adapters::none(), false, [](std::size_t, auto) {}),
                 Error);
    EXPECT_EQ(cache.cached_len(), 9);
}

}  // namespace
}  // namespace kvweld
