// A mixture of experts (engine/config.hpp): the routed feed-forward in the
// reference and the CPU plan, its files, and the contract row for
// llama.cpp's warmup switch, both halves: warmup is step data for kvweld's
// plan (a switch keeps the plan, and the kept plan routes as the reference
// does under the new setting); the faults that break each half break it.
#include "engine/checkpoint.hpp"
#include "engine/decode_session.hpp"
#include "engine/faults.hpp"
#include "engine/gguf.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace kvweld {
namespace {

using testing::expect_error;
using testing::kCpuTolerance;

constexpr double kMargin = 100 * kCpuTolerance;

TEST(MoeConfig, ImpossibleExpertCountsAreRefusedNamingTheField) {
    ModelConfig c = config_by_name("tiny-moe");
    EXPECT_EQ(c.n_experts, 4);
    EXPECT_EQ(c.n_experts_used, 2);
    c.n_experts_used = 5;
    expect_error([&] { c.validate(); }, {"n_experts_used = 5", "1..n_experts = 4"});
    c.n_experts = 1;
    expect_error([&] { c.validate(); }, {"n_experts = 1", "2..64"});
    ModelConfig dense = tiny_config();
    dense.n_experts_used = 2;
    expect_error([&] { dense.validate(); }, {"n_experts = 0", "n_experts_used = 2", "must then be 0"});
}

class MoeContract : public ::testing::Test {
protected:
    // Decodes `token` with the state held now: the error against the
    // reference under it, and (with `other`) under other state.
    double step(int token, const Adapters* other = nullptr, double* other_error = nullptr) {
        const std::span<const float> got = session.decode(model, cache, token, state);
        const std::vector<float> logits(got.begin(), got.end());
        if (other) {
            ReferenceKv copy = shadow;
            *other_error = logit_error(logits, reference_forward(model, copy, token, pos, *other));
        }
        return logit_error(logits, reference_forward(model, shadow, token, pos++, state));
    }
    std::uint64_t builds() const { return session.counters().builds; }

    Model model = Model::random(config_by_name("tiny-moe"), 41);
    KvCache cache = KvCache::with_capacity(model.config());
    DecodeSession session;
    Adapters state;
    ReferenceKv shadow{model.config()};
    int pos = 0;
};

TEST_F(MoeContract, TheRoutedPlanFollowsTheReferenceAndTheRouterMatters) {
    for (int t : testing::random_tokens(24, model.config().vocab, 7)) EXPECT_LE(step(t), kCpuTolerance);
    EXPECT_EQ(builds(), 1u);
    // The routing is real: with every expert weighed (warmup) the same
    // history gives other rows.
    Adapters warm;
    warm.set_warmup(true);
    double under_warmup = 0;
    EXPECT_LE(step(3, &warm, &under_warmup), kCpuTolerance);
    EXPECT_GT(under_warmup, kMargin);
}

TEST_F(MoeContract, AWarmupSwitchKeepsThePlanAndTheKeptPlanRoutesByIt) {
    for (int t : testing::random_tokens(4, model.config().vocab, 5)) ASSERT_LE(step(t), kCpuTolerance);
    for (bool on : {true, false, true}) {
        Adapters before;
        before.set_warmup(!on);
        state.set_warmup(on);
        EXPECT_EQ(session.check(model, cache, state), Validity::valid()) << "warmup " << on;
        double stale = 0;
        EXPECT_LE(step(9, &before, &stale), kCpuTolerance) << "warmup " << on;
        EXPECT_GT(stale, kMargin) << "warmup " << on << ": the other setting must give other rows";
    }
    // The same setting again is no change at all.
    const std::uint64_t version = state.warmup_version();
    state.set_warmup(true);
    EXPECT_EQ(state.warmup_version(), version);
    EXPECT_EQ(builds(), 1u);
}

TEST_F(MoeContract, EachWarmupFaultBreaksItsHalf) {
    if (!kFaultsCompiled) GTEST_SKIP() << "this build has no fault switches (KVWELD_FAULTS)";
    auto with = [](Fault f) {
        FaultSet s;
        s.add(f);
        return s;
    };
    for (int t : testing::random_tokens(3, model.config().vocab, 5)) ASSERT_LE(step(t), kCpuTolerance);
    {  // the plan routes as it was built (warmup off) after the switch
        const ScopedFaults on(with(Fault::warmup_baked));
        state.set_warmup(true);
        EXPECT_EQ(session.check(model, cache, state), Validity::valid());
        EXPECT_GT(step(4), kMargin);
        cache.truncate_to(--pos);
    }
    {
        const ScopedFaults on(with(Fault::warmup_in_key));
        state.set_warmup(false);
        EXPECT_EQ(session.check(model, cache, state), Validity::stale(StaleReason::adapters));
    }
}

TEST(MoeDense, WarmupOnADenseModelChangesNothing) {
    const Model model = Model::random(tiny_config(), 3);
    KvCache cache = KvCache::with_capacity(model.config());
    DecodeSession session;
    Adapters state;
    ReferenceKv shadow(model.config());
    int pos = 0;
    for (int t : testing::random_tokens(6, model.config().vocab, 2)) {
        state.set_warmup(pos % 2 == 1);
        const std::span<const float> got = session.decode(model, cache, t, state);
        const std::vector<float> cold = reference_forward(model, shadow, t, pos++, Adapters::none());
        EXPECT_LE(logit_error(got, cold), kCpuTolerance);
    }
    EXPECT_EQ(session.counters().builds, 1u);
}

TEST(MoeFiles, Llama2cRefusesExpertsAndGgufNamesThem) {
    const Model model = Model::random(config_by_name("tiny-moe"), 4);
    expect_error([&] { serialize_llama2c(model); }, {"dense models only", "experts=2/4", "GGUF"});
    const std::vector<std::byte> bytes = serialize_gguf(model);
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    for (const char* name : {"llama.expert_count", "llama.expert_used_count", "blk.1.ffn_gate_inp.weight",
                             "blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"})
        EXPECT_NE(text.find(name), std::string::npos) << name;
    EXPECT_EQ(text.find("blk.0.ffn_down.weight"), std::string::npos) << "an MoE layer has no dense ffn_down";
    EXPECT_GE(bytes.size(), model.all_weights().size_bytes());
    // Adapters leave the experts alone: no ffn_down matrix, the others there.
    const auto lora = LoraAdapter::random(model.config(), 2, 2.0f, 1);
    EXPECT_EQ(lora->matrix(0, LoraTarget::w2).rank, 0);
    EXPECT_EQ(lora->matrix(0, LoraTarget::wq).rank, 2);
}

TEST(MoeCuda, TheCudaBackendRefusesAnMoeModelNamingItAndDecodesNothing) {
    const Model model = Model::random(config_by_name("tiny-moe"), 4);
    KvCache cache = KvCache::with_capacity(model.config());
    DecodeSession cuda(SessionOptions{.backend = Backend::cuda});
    expect_error([&] { cuda.decode(model, cache, 1); }, {"backend=cuda", "mixture-of-experts", "experts=2/4"});
    EXPECT_EQ(cache.cached_len(), 0);
    EXPECT_FALSE(cuda.has_plan());
}

}  // namespace
}  // namespace kvweld
