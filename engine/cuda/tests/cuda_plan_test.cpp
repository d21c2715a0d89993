// The CUDA plan against the reference forward, and the plan contract on
// CUDA, both halves: truncate keeps the graph; clear / set_layer rebind it
// by rewriting node parameters; a model swap re-captures.
#include "cuda_test_util.hpp"
#include "engine/cuda/cuda_plan.hpp"
#include "engine/faults.hpp"
#include "engine/reference.hpp"
#include "util/rng.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::cuda {
namespace {


double error(std::span<const float> got, const std::vector<float>& want) { return logit_error(got, want); }

std::vector<int> tokens(int n, int vocab, std::uint64_t seed) {
    Rng rng(seed);
    std::vector<int> out(n);
    for (int& t : out) t = int(rng.below(vocab));
    return out;
}

struct CudaRequest {
    explicit CudaRequest(const Model& m)
        : model(&m), cache(KvCache::with_capacity(m.config())), session({.backend = Backend::cuda}), shadow(m.config()) {}
    double step(int token) {
        const std::vector<float> want = reference_forward(*model, shadow, token, cache.cached_len());
        return error(session.decode(*model, cache, token), want);
    }
    double steps(int n, std::uint64_t seed) {
        double worst = 0.0;
        for (int t : tokens(n, model->config().vocab, seed)) worst = std::max(worst, step(t));
        return worst;
    }
    const Model* model;
    KvCache cache;
    DecodeSession session;
    ReferenceKv shadow;
};

TEST(CudaPlan, HeldGraphMatchesReference) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    for (Family f : {Family::llama, Family::qwen3}) {
        const Model model = Model::random(tiny_config(f), 3);
        CudaRequest r(model);
        EXPECT_LE(r.steps(200, 1), kDataTolerance) << to_string(f);
        EXPECT_EQ(r.session.counters().builds, 1u);
        EXPECT_EQ(r.session.counters().kept, 199u);
    }
}

TEST(CudaPlan, GraphAndPlainStreamLaunchesAgree) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const Model model = Model::random(tiny_config(), 4);
    auto a = KvCache::with_capacity(model.config()), b = KvCache::with_capacity(model.config());
    CudaPlan graph(model, a, CudaPlan::Mode::graph), stream(model, b, CudaPlan::Mode::stream);
    EXPECT_GT(graph.graph_nodes(), 10u);
    for (int pos = 0; pos < 20; ++pos) {
        const StepParams s{pos % 64, pos, pos + 1};
        const std::span<const float> from_graph = graph.run(s);
        const std::vector<float> x(from_graph.begin(), from_graph.end());
        const std::span<const float> y = stream.run(s);
        ASSERT_TRUE(std::equal(x.begin(), x.end(), y.begin()));
    }
}

TEST(CudaPlan, TruncateKeepsTheGraph) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const Model model = Model::random(tiny_config(), 5);
    CudaRequest r(model);
    r.steps(10, 2);
    const KvAllocId id = r.cache.alloc_id();
    r.cache.truncate_to(3);
    EXPECT_EQ(r.cache.alloc_id(), id);
    EXPECT_LE(r.steps(5, 3), kDataTolerance);
    EXPECT_EQ(r.session.counters().builds, 1u);
    EXPECT_EQ(r.session.counters().rebinds, 0u);
}

// Rows [first, first + n) of layer storage as the device holds them.
std::vector<float> device_keys(KvStorage& s, int first, int n) {
    s.device()->download(s, first, n);
    return {s.key_row(first), s.key_row(first) + std::size_t(n) * s.kv_dim()};
}

std::vector<float> shadow_keys(const ReferenceKv& shadow, int layer, int first, int n, int kv_dim) {
    const auto& k = shadow.key[std::size_t(layer)];
    return {k.begin() + std::ptrdiff_t(first) * kv_dim, k.begin() + std::ptrdiff_t(first + n) * kv_dim};
}

bool all_zero(const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; });
}

TEST(CudaPlan, ClearAndSetLayerRebindTheGraph) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const Model model = Model::random(tiny_config(), 6);
    const int kv_dim = model.config().kv_dim();
    CudaRequest r(model);
    r.steps(8, 4);
    const KvLayer old = r.cache.layer(1);
    r.cache.set_layer(1, r.cache.layer(1)->copy());  // device content cloned
    EXPECT_NE(r.session.bound_serials(), r.cache.storage_serials());
    EXPECT_LE(r.steps(4, 5), kDataTolerance);
    EXPECT_EQ(r.session.counters().rebinds, 1u);
    EXPECT_EQ(r.session.bound_serials(), r.cache.storage_serials());
    // The copy holds identical rows, so logits alone cannot tell whether the
    // graph really moved: read the device back. Rows 8..11 were written
    // after the rebind: the new buffer has them, the old one does not.
    EXPECT_LE(logit_error(device_keys(*r.cache.layer(1), 8, 4), shadow_keys(r.shadow, 1, 8, 4, kv_dim)), kDataTolerance);
    EXPECT_TRUE(all_zero(device_keys(*old, 8, 4)));
    EXPECT_LE(logit_error(device_keys(*old, 0, 8), shadow_keys(r.shadow, 1, 0, 8, kv_dim)), kDataTolerance);
    r.cache.clear();
    r.shadow = ReferenceKv(model.config());
    EXPECT_LE(r.steps(6, 6), kDataTolerance);
    EXPECT_EQ(r.session.counters().rebinds, 2u);
    EXPECT_EQ(r.session.counters().builds, 1u);
}

TEST(CudaPlan, ModelSwapRecaptures) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const Model a = Model::random(tiny_config(), 7), b = Model::random(tiny_config(), 8);
    CudaRequest r(a);
    r.steps(4, 7);
    EXPECT_EQ(r.session.check(b, r.cache), Validity::stale(BuildReason::model_instance));
    r.model = &b;
    EXPECT_LE(r.steps(4, 8), kDataTolerance);
    EXPECT_EQ(r.session.counters().builds, 2u);
}

TEST(CudaPlan, IncompatibleRebindChangesNothing) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const Model model = Model::random(tiny_config(), 9);
    auto cache = KvCache::with_capacity(model.config());
    CudaPlan plan(model, cache);
    const auto serials = plan.bound_serials();
    auto fresh = KvCache::with_capacity(model.config());
    std::vector<KvLayer> layers = {fresh.layer(0), std::make_shared<KvStorage>(256, 4)};
    EXPECT_THROW(plan.rebind(layers), Error);
    EXPECT_EQ(plan.bound_serials(), serials);
}

// A node update that fails half-way through a rebind leaves the plan
// exactly as it was: bound to the old buffers, which it keeps reading and
// writing, and the new buffers untouched.
TEST(CudaPlan, FailedNodeUpdateRollsTheRebindBack) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const Model model = Model::random(tiny_config(), 14);
    const int kv_dim = model.config().kv_dim();
    auto a = KvCache::with_capacity(model.config()), b = KvCache::with_capacity(model.config());
    CudaPlan plan(model, a);
    ReferenceKv shadow(model.config());
    const std::vector<int> ts = tokens(10, 64, 15);
    auto decode = [&](int pos) {
        const std::vector<float> want = reference_forward(model, shadow, ts[std::size_t(pos)], pos);
        return logit_error(plan.run({ts[std::size_t(pos)], pos, pos + 1}), want);
    };
    for (int pos = 0; pos < 5; ++pos) ASSERT_LE(decode(pos), kDataTolerance);
    const auto serials = plan.bound_serials();
    std::vector<KvLayer> next = {b.layer(0), b.layer(1)};
    plan.fail_node_update(2);  // the third of four node updates fails
    EXPECT_THROW(plan.rebind(next), Error);
    plan.fail_node_update(std::nullopt);
    EXPECT_EQ(plan.bound_serials(), serials);
    for (int pos = 5; pos < 10; ++pos) EXPECT_LE(decode(pos), kDataTolerance) << pos;
    for (int l = 0; l < 2; ++l) {
        EXPECT_TRUE(all_zero(device_keys(*b.layer(l), 0, 10))) << "layer " << l;
        EXPECT_LE(logit_error(device_keys(*a.layer(l), 0, 10), shadow_keys(shadow, l, 0, 10, kv_dim)), kDataTolerance);
    }
}

TEST(CudaPlan, SlotReuseWithoutTheKeyCheckDecodesStaleKv) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const Model model = Model::random(tiny_config(), 10);
    auto run = [&](FaultSet faults) {
        ScopedFaults scoped(faults);
        DecodeSession held({.backend = Backend::cuda});
        {
            auto a = KvCache::with_capacity(model.config());
            for (int t : tokens(30, 64, 11)) held.decode(model, a, t);
        }
        auto b = KvCache::with_capacity(model.config());
        ReferenceKv shadow(model.config());
        DecodeSession prefill({.backend = Backend::cuda});
        for (int t : tokens(20, 64, 12)) {
            reference_forward(model, shadow, t, b.cached_len());
            prefill.decode(model, b, t);
        }
        double worst = 0.0;
        for (int t : tokens(5, 64, 13)) {
            const std::vector<float> want = reference_forward(model, shadow, t, b.cached_len());
            worst = std::max(worst, error(held.decode(model, b, t), want));
        }
        return worst;
    };
    EXPECT_LE(run({}), kDataTolerance);
    FaultSet bypass;
    bypass.add(Fault::geometry_only_key);
    EXPECT_GT(run(bypass), 100 * kDataTolerance);
}

TEST(CudaPlan, UnavailableBackendErrorIsClear) {
    std::string why;
    if (cuda_backend_available(&why)) GTEST_SKIP() << "a CUDA device is present";
    const Model model = Model::random(tiny_config(), 1);
    auto cache = KvCache::with_capacity(model.config());
    DecodeSession s({.backend = Backend::cuda});
    try {
        s.decode(model, cache, 1);
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("CUDA backend unavailable"), std::string::npos) << e.what();
    }
    EXPECT_EQ(cache.cached_len(), 0);
}

// LoRA adapters and a control vector on CUDA, both halves: the set is in
// the key (a new set re-captures), the scales and the vector are step data
// (the graph is kept and applies them, as the reference does).
TEST(CudaPlan, AdaptersAreAppliedScalesAndVectorAreStepData) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const Model model = Model::random(tiny_config(), 5);
    const ModelConfig& c = model.config();
    auto a = LoraAdapter::random(c, 2, 2.0f, 1), b = LoraAdapter::random(c, 4, 8.0f, 2);
    KvCache cache = KvCache::with_capacity(c);
    DecodeSession session({.backend = Backend::cuda});
    ReferenceKv shadow(c);
    Adapters adapters;
    int pos = 0;
    auto step = [&](int token) {
        const std::vector<float> want = reference_forward(model, shadow, token, pos++, adapters);
        return error(session.decode(model, cache, token, adapters), want);
    };
    adapters.set_loras(c, {{a, 1.0f}, {b, 0.5f}});
    adapters.set_cvec(c, ControlVector::random(c, 1, 1, 1));
    for (int t : tokens(8, c.vocab, 3)) EXPECT_LE(step(t), kDataTolerance);
    adapters.set_loras(c, {{a, 2.0f}, {b, 0.0f}});  // scales: step data
    adapters.set_cvec(c, ControlVector::random(c, 2, 1, 1));
    for (int t : tokens(4, c.vocab, 4)) EXPECT_LE(step(t), kDataTolerance);
    adapters.set_cvec(c, std::nullopt);
    EXPECT_LE(step(5), kDataTolerance);
    EXPECT_EQ(session.counters().builds, 1u);
    adapters.set_loras(c, {{b, 1.0f}});  // another set: a new graph
    EXPECT_LE(step(6), kDataTolerance);
    EXPECT_EQ(session.counters().builds, 2u);
    EXPECT_EQ(session.counters().by(BuildReason::adapters), 1u);
}

}  // namespace
}  // namespace kvweld::cuda
