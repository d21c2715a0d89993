// A mixture of experts (engine/config.hpp): the routed feed-forward in the
// reference and the CPU plan, its files, and the contract row for
// llama.cpp's warmup switch, both halves: warmup is step data for kvweld's
// plan (a switch keeps the plan, and the kept plan routes as the reference
// does under the new setting); the faults that break each half break it.
#include "engine/checkpoint.hpp"
#include "engine/decode_session.hpp"
#include "engine/faults.hpp"
#include "engine/gguf.hpp"
#include "engine/reference.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace kvweld {
namespace {

using testing::expect_error;
using testing::kCpuTolerance;
using testing::kMargin;

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

// Both halves of the reference's routing tie (kRoutingTieMargin): with
// every expert's router row the same, every choice is a tie and every
// position says so; with random routers none of 24 does. A context shift
// carries a position's tie with its row.
TEST(MoeReference, ARoutingTieIsMarkedAndOnlyThen) {
    Model tied = Model::random(config_by_name("tiny-moe"), 41);
    const ModelConfig& c = tied.config();
    const auto d = std::size_t(c.dim);
    for (int l = 0; l < c.n_layers; ++l) {
        const auto at = std::size_t(tied.layer(l).router.data() - tied.all_weights().data());
        float* router = tied.all_weights_mut().data() + at;
        for (int e = 1; e < c.n_experts; ++e) std::copy_n(router, d, router + std::size_t(e) * d);
    }
    ReferenceKv all_tied(c);
    for (int pos = 0; pos < 3; ++pos) reference_forward(tied, all_tied, pos + 1, pos);
    EXPECT_TRUE(all_tied.routing_tied(0));
    EXPECT_EQ(std::count(all_tied.routing_tie.begin(), all_tied.routing_tie.begin() + 3, 1), 3);

    const Model model = Model::random(c, 41);
    ReferenceKv kv(c);
    const std::vector<int> tokens = testing::random_tokens(24, c.vocab, 7);
    for (int pos = 0; pos < 24; ++pos) reference_forward(model, kv, tokens[std::size_t(pos)], pos);
    EXPECT_FALSE(kv.routing_tied(23));
    kv.routing_tie[10] = 1;  // as if position 10 had tied: a shift of [2, 6) carries it to 6
    kv.shift(c, 2, 6, 24);
    EXPECT_FALSE(kv.routing_tied(5));
    EXPECT_TRUE(kv.routing_tied(6));
}

class MoeContract : public ::testing::Test, public testing::AdaptedDecode {
protected:
    MoeContract() : AdaptedDecode(Model::random(config_by_name("tiny-moe"), 41)) {}
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
        adapters.set_warmup(on);
        EXPECT_EQ(session.check(model, cache, adapters), Validity::valid()) << "warmup " << on;
        double stale = 0;
        EXPECT_LE(step(9, &before, &stale), kCpuTolerance) << "warmup " << on;
        EXPECT_GT(stale, kMargin) << "warmup " << on << ": the other setting must give other rows";
    }
    // The same setting again is no change at all.
    const std::uint64_t version = adapters.warmup_version();
    adapters.set_warmup(true);
    EXPECT_EQ(adapters.warmup_version(), version);
    EXPECT_EQ(builds(), 1u);
}

TEST_F(MoeContract, EachWarmupFaultBreaksItsHalf) {
    if (!kFaultsCompiled) GTEST_SKIP() << "this build has no fault switches (KVWELD_FAULTS)";
    for (int t : testing::random_tokens(3, model.config().vocab, 5)) ASSERT_LE(step(t), kCpuTolerance);
    {  // the plan routes as it was built (warmup off) after the switch
        const ScopedFaults on(testing::only(Fault::warmup_baked));
        adapters.set_warmup(true);
        EXPECT_EQ(session.check(model, cache, adapters), Validity::valid());
        EXPECT_GT(step(4), kMargin);
        undo();
    }
    {
        const ScopedFaults on(testing::only(Fault::warmup_in_key));
        adapters.set_warmup(false);
        EXPECT_EQ(session.check(model, cache, adapters), Validity::stale(BuildReason::adapters));
    }
}

TEST(MoeDense, WarmupOnADenseModelChangesNothing) {
    testing::AdaptedDecode r(Model::random(tiny_config(), 3));
    const Adapters cold;
    for (int t : testing::random_tokens(6, r.model.config().vocab, 2)) {
        r.adapters.set_warmup(r.pos % 2 == 1);
        double vs_cold = 0;
        EXPECT_LE(r.step(t, &cold, &vs_cold), kCpuTolerance);
        EXPECT_LE(vs_cold, kCpuTolerance);
    }
    EXPECT_EQ(r.builds(), 1u);
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
