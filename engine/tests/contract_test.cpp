// The plan contract, both halves in every test: what must invalidate does,
// and what must not, does not.
#include "engine/cpu_plan.hpp"
#include "engine/decode_session.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

namespace kvweld {
namespace {

using testing::kCpuTolerance;
using testing::Shadow;

// One request: a model, its cache, a session and the reference shadow.
struct Request {
    explicit Request(const Model& m, SessionOptions opts = {})
        : model(&m), cache(KvCache::with_capacity(m.config())), session(opts), shadow(m) {}

    // Decodes one token and returns the logits' distance from the reference.
    double step(int token) {
        const std::vector<float> expected = shadow.step(token);
        return logit_error(session.decode(*model, cache, token), expected);
    }
    void steps(int n, std::uint64_t seed = 1) {
        for (int t : testing::random_tokens(n, model->config().vocab, seed))
            ASSERT_LE(step(t), kCpuTolerance);
    }
    const Model* model;
    KvCache cache;
    DecodeSession session;
    Shadow shadow;
};

class Contract : public ::testing::Test {
protected:
    Model model = Model::random(tiny_config(), 21);
};

TEST_F(Contract, SameGeometryCachesGetDifferentIds) {
    const auto a = KvCache::with_capacity(model.config());
    const auto b = KvCache::with_capacity(model.config());
    EXPECT_EQ(a.geometry(), b.geometry());
    EXPECT_NE(a.alloc_id(), b.alloc_id());
    // and the same cache keeps its id while nothing replaces its storage:
    // appending rows and reading them back are not a new allocation
    auto c = KvCache::with_capacity(model.config());
    const KvAllocId id = c.alloc_id();
    const auto serials = c.storage_serials();
    c.advance();
    c.advance();
    EXPECT_EQ(c.alloc_id(), id);
    EXPECT_EQ(c.storage_serials(), serials);
}

TEST_F(Contract, UnchangedModelAndCacheKeepThePlan) {
    Request r(model);
    r.steps(12);
    EXPECT_EQ(r.session.check(model, r.cache), Validity::valid());
    EXPECT_EQ(r.session.counters().builds, 1u);
    EXPECT_EQ(r.session.counters().kept, 11u);
    // the other half: a different cache of the same shape is not Valid
    const auto other = KvCache::with_capacity(model.config());
    EXPECT_EQ(r.session.check(model, other), Validity::allocation_changed());
}

TEST_F(Contract, TruncateKeepsIdAndPlanIsReusedAndCorrect) {
    Request r(model);
    r.steps(10);
    const KvAllocId id = r.cache.alloc_id();
    const auto serials = r.session.bound_serials();
    r.cache.truncate_to(4);
    r.shadow.truncate_to(4);
    EXPECT_EQ(r.cache.alloc_id(), id);
    EXPECT_EQ(r.session.check(model, r.cache), Validity::valid());
    const SessionCounters before = r.session.counters();
    EXPECT_LE(r.step(7), kCpuTolerance);
    EXPECT_LE(r.step(8), kCpuTolerance);
    EXPECT_EQ(r.session.counters().builds, before.builds);
    EXPECT_EQ(r.session.counters().rebinds, before.rebinds);
    EXPECT_EQ(r.session.counters().kept, before.kept + 2);
    EXPECT_EQ(r.session.bound_serials(), serials);
}

// After clear(), the request is re-prefilled from its history (preemption).
void replay_history(Request& r, const std::vector<int>& history) {
    r.shadow.truncate_to(0);
    for (int t : history) ASSERT_LE(r.step(t), kCpuTolerance);
}

TEST_F(Contract, ClearChangesIdAndRebindsAndIsCorrect) {
    Request r(model);
    const std::vector<int> history = testing::random_tokens(9, model.config().vocab, 3);
    replay_history(r, history);
    const KvAllocId id = r.cache.alloc_id();
    r.cache.clear();
    EXPECT_NE(r.cache.alloc_id(), id);
    EXPECT_EQ(r.session.check(model, r.cache), Validity::allocation_changed());
    replay_history(r, history);
    EXPECT_EQ(r.session.counters().builds, 1u);
    EXPECT_EQ(r.session.counters().rebinds, 1u);
    EXPECT_EQ(r.session.bound_serials(), r.cache.storage_serials());
}

TEST_F(Contract, ClearUnderRebuildPolicyRebuilds) {
    Request r(model, {.policy = RebindPolicy::rebuild});
    r.steps(5);
    r.cache.clear();
    r.shadow.truncate_to(0);
    r.steps(5);
    EXPECT_EQ(r.session.counters().builds, 2u);
    EXPECT_EQ(r.session.counters().by(BuildReason::allocation_changed), 1u);
    EXPECT_EQ(r.session.counters().rebinds, 0u);
    EXPECT_EQ(r.session.bound_serials(), r.cache.storage_serials());
}

TEST_F(Contract, SetLayerChangesIdAndRebindsAndIsCorrect) {
    Request r(model);
    r.steps(8);
    const KvAllocId id = r.cache.alloc_id();
    r.cache.set_layer(1, r.cache.layer(1)->copy());  // swap-in: same content, new storage
    EXPECT_NE(r.cache.alloc_id(), id);
    EXPECT_NE(r.session.bound_serials(), r.cache.storage_serials());
    EXPECT_EQ(r.session.check(model, r.cache), Validity::allocation_changed());
    r.steps(6, 2);
    EXPECT_EQ(r.session.counters().rebinds, 1u);
    EXPECT_EQ(r.session.counters().builds, 1u);
    EXPECT_EQ(r.session.bound_serials(), r.cache.storage_serials());
}

TEST_F(Contract, SameGeometryModelSwapIsStaleAndRebuilds) {
    Request r(model);
    r.steps(6);
    const Model reloaded = Model::random(model.config(), 22);  // same shape, new weights
    EXPECT_EQ(r.session.check(model, r.cache), Validity::valid());
    EXPECT_EQ(r.session.check(reloaded, r.cache), Validity::stale(BuildReason::model_instance));
    r.model = &reloaded;
    r.shadow.use_model(reloaded);
    r.steps(4, 5);
    EXPECT_EQ(r.session.counters().builds, 2u);
    EXPECT_EQ(r.session.counters().by(BuildReason::model_instance), 1u);
    EXPECT_EQ(r.session.check(reloaded, r.cache), Validity::valid());
}

TEST_F(Contract, ReloadWithIdenticalWeightsIsStillANewModel) {
    Request r(model);
    r.steps(3);
    const Model same_weights = Model::random(model.config(), 21);
    EXPECT_EQ(r.session.check(same_weights, r.cache), Validity::stale(BuildReason::model_instance));
}

TEST_F(Contract, CapacityAndFamilyChangesAreStale) {
    Request r(model);
    r.steps(2);
    KvGeometry shorter = KvGeometry::of(model.config());
    shorter.max_seq_len = 64;
    EXPECT_EQ(r.session.check(model, KvCache::with_capacity(shorter)),
              Validity::stale(BuildReason::max_seq_len));
    ModelConfig q = model.config();
    q.family = Family::qwen3;
    const Model qwen = Model::random(q, 1);
    EXPECT_EQ(r.session.check(qwen, r.cache), Validity::stale(BuildReason::family));
}

TEST_F(Contract, IncompatibleSetLayerIsRefusedAndNothingChanges) {
    Request r(model);
    r.steps(4);
    const KvAllocId id = r.cache.alloc_id();
    const auto serials = r.cache.storage_serials();
    EXPECT_THROW(r.cache.set_layer(0, std::make_shared<KvStorage>(128, model.config().kv_dim())), Error);
    EXPECT_THROW(r.cache.set_layer(0, std::make_shared<KvStorage>(256, 8)), Error);
    EXPECT_THROW(r.cache.set_layer(0, nullptr), Error);
    EXPECT_EQ(r.cache.alloc_id(), id);
    EXPECT_EQ(r.cache.storage_serials(), serials);
    EXPECT_EQ(r.cache.cached_len(), 4);
    r.steps(2, 9);  // and the plan is still kept
    EXPECT_EQ(r.session.counters().rebinds, 0u);
    EXPECT_EQ(r.session.counters().builds, 1u);
}

TEST_F(Contract, IncompatibleRebindIsAllOrNothing) {
    auto cache = KvCache::with_capacity(model.config());
    CpuPlan plan(model, cache);
    const auto serials = plan.bound_serials();
    auto fresh = KvCache::with_capacity(model.config());
    std::vector<KvLayer> layers = {fresh.layer(0), std::make_shared<KvStorage>(256, 4)};
    EXPECT_THROW(plan.rebind(layers), Error);
    EXPECT_EQ(plan.bound_serials(), serials);  // layer 0 was not moved either
    layers[1] = fresh.layer(1);
    plan.rebind(layers);
    EXPECT_EQ(plan.bound_serials(), fresh.storage_serials());
}

}  // namespace
}  // namespace kvweld
