// The contract rows for what a plan bakes in besides the KV storage
// (engine/adapters.hpp), both halves in each: the adapter set is part of
// the key (a new set rebuilds, the same set keeps the plan); scales and the
// control vector are step data (a change keeps the plan, and the kept plan
// applies the change: its rows move with the reference's). The faults that
// break each half are shown to break it.
#include "engine/adapters.hpp"
#include "engine/cuda_limits.hpp"
#include "engine/decode_session.hpp"
#include "engine/faults.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

namespace kvweld {
namespace {

using testing::expect_error;
using testing::kCpuTolerance;
using testing::kMargin;

class AdapterContract : public ::testing::Test, public testing::AdaptedDecode {
protected:
    AdapterContract() : AdaptedDecode(Model::random(tiny_config(), 31)) {}

    std::shared_ptr<const LoraAdapter> a = LoraAdapter::random(model.config(), 2, 2.0f, 1);
    std::shared_ptr<const LoraAdapter> b = LoraAdapter::random(model.config(), 4, 8.0f, 2);
};

TEST_F(AdapterContract, ANewAdapterSetRebuildsAndTheSameSetKeepsThePlan) {
    prefill(4);
    const Adapters none;
    adapters.set_loras(model.config(), {{a, 1.0f}});
    EXPECT_EQ(session.check(model, cache, adapters), Validity::stale(BuildReason::adapters));
    double without = 0;
    EXPECT_LE(step(7, &none, &without), kCpuTolerance);
    EXPECT_GT(without, kMargin) << "the adapter must change the rows";
    EXPECT_EQ(builds(), 2u);
    EXPECT_EQ(session.counters().by(BuildReason::adapters), 1u);
    // the other half: the same adapters at the same scales are no change
    const AdapterSetId id = adapters.set_id();
    adapters.set_loras(model.config(), {{a, 1.0f}});
    EXPECT_EQ(adapters.set_id(), id);
    EXPECT_EQ(session.check(model, cache, adapters), Validity::valid());
    EXPECT_LE(step(8), kCpuTolerance);
    EXPECT_EQ(builds(), 2u);
    // another set, and no set, are new keys
    adapters.set_loras(model.config(), {{a, 1.0f}, {b, 0.5f}});
    EXPECT_EQ(session.check(model, cache, adapters), Validity::stale(BuildReason::adapters));
    EXPECT_LE(step(9), kCpuTolerance);
    adapters.set_loras(model.config(), {});
    EXPECT_EQ(session.check(model, cache, adapters), Validity::stale(BuildReason::adapters));
    EXPECT_LE(step(10), kCpuTolerance);
    EXPECT_EQ(builds(), 4u);
}

TEST_F(AdapterContract, AScaleChangeKeepsThePlanAndTheKeptPlanAppliesIt) {
    adapters.set_loras(model.config(), {{a, 1.0f}, {b, 1.0f}});
    prefill(4);
    for (float scale : {0.5f, 2.0f, 0.0f, -1.0f}) {
        Adapters before;
        before.set_loras(model.config(), {adapters.loras().begin(), adapters.loras().end()});
        adapters.set_loras(model.config(), {{a, 1.0f}, {b, scale}});
        EXPECT_EQ(session.check(model, cache, adapters), Validity::valid()) << "scale " << scale;
        double stale = 0;
        EXPECT_LE(step(3, &before, &stale), kCpuTolerance) << "scale " << scale;
        EXPECT_GT(stale, kMargin) << "scale " << scale << ": the old scale must give other rows";
    }
    EXPECT_EQ(builds(), 1u);  // one build for the set; every scale was step data
}

TEST_F(AdapterContract, AZeroScaleAdapterAddsNothingAndKeepsThePlan) {
    // llama.cpp PR 20166: a zero-scale LoRA passed on every call made the
    // server re-reserve its graph on every token. Here it is one build.
    adapters.set_loras(model.config(), {{a, 0.0f}});
    const Adapters none;
    double vs_none = 0;
    for (int i = 0; i < 6; ++i) EXPECT_LE(step(i + 1, &none, &vs_none), kCpuTolerance);
    EXPECT_LE(vs_none, kCpuTolerance);
    EXPECT_EQ(builds(), 1u);
    EXPECT_EQ(session.counters().kept, 5u);
}

TEST_F(AdapterContract, AControlVectorSetChangedReRangedOrClearedKeepsThePlanAndIsApplied) {
    prefill(4);
    const ModelConfig& c = model.config();
    const std::optional<ControlVector> states[] = {
        ControlVector::random(c, 1, 1, 1),  // set
        ControlVector::random(c, 2, 1, 1),  // changed
        ControlVector::random(c, 2, 0, 0),  // re-ranged to layer 0 only, which never has one: adds nothing
        ControlVector::random(c, 2, 0, 1),  // re-ranged to take layer 1 again
        std::nullopt,                       // cleared
    };
    for (std::size_t i = 0; i < std::size(states); ++i) {
        Adapters before;
        if (adapters.cvec()) before.set_cvec(c, *adapters.cvec());
        adapters.set_cvec(c, states[i]);
        EXPECT_EQ(session.check(model, cache, adapters), Validity::valid()) << "state " << i;
        double stale = 0;
        EXPECT_LE(step(int(i) + 3, &before, &stale), kCpuTolerance) << "state " << i;
        EXPECT_GT(stale, kMargin) << "state " << i << ": the vector held before must give other rows";
    }
    EXPECT_EQ(builds(), 1u);
}

TEST_F(AdapterContract, EachFaultBreaksItsHalf) {
    if (!kFaultsCompiled) GTEST_SKIP() << "this build has no fault switches (KVWELD_FAULTS)";
    adapters.set_loras(model.config(), {{a, 1.0f}});
    prefill(3);
    {  // a new set kept under adapter_set_not_in_key: the old set's rows
        const ScopedFaults on(testing::only(Fault::adapter_set_not_in_key));
        adapters.set_loras(model.config(), {{b, 1.0f}});
        EXPECT_EQ(session.check(model, cache, adapters), Validity::valid());
        EXPECT_GT(step(4), kMargin);
        undo();
    }
    session = DecodeSession{};  // a plan built for {b}, then the scale faults
    EXPECT_LE(step(5), kCpuTolerance);
    {
        const ScopedFaults on(testing::only(Fault::lora_scale_baked));
        adapters.set_loras(model.config(), {{b, 2.0f}});
        EXPECT_EQ(session.check(model, cache, adapters), Validity::valid());
        EXPECT_GT(step(6), kMargin);
        undo();
    }
    {
        const ScopedFaults on(testing::only(Fault::lora_scale_in_key));
        adapters.set_loras(model.config(), {{b, 0.5f}});
        EXPECT_EQ(session.check(model, cache, adapters), Validity::stale(BuildReason::adapters));
    }
    {
        const ScopedFaults on(testing::only(Fault::cvec_in_key));
        adapters.set_cvec(model.config(), ControlVector::random(model.config(), 3, 1, 1));
        EXPECT_EQ(session.check(model, cache, adapters), Validity::stale(BuildReason::adapters));
    }
    {
        const ScopedFaults on(testing::only(Fault::cvec_baked));
        EXPECT_GT(step(7), kMargin);  // the plan was built with no vector
    }
}

TEST_F(AdapterContract, BadAdaptersAreRefusedNamingTheValueAndNothingChanges) {
    adapters.set_loras(model.config(), {{a, 1.0f}});
    adapters.set_cvec(model.config(), ControlVector::random(model.config(), 1, 1, 1));
    const AdapterSetId id = adapters.set_id();
    ModelConfig wide = model.config();
    wide.ffn_dim += 16;
    expect_error([&] { adapters.set_loras(model.config(), {{LoraAdapter::random(wide, 2, 2.0f, 3), 1.0f}}); },
                 {"another shape", "ffn=80", "ffn=64"});
    expect_error([&] { adapters.set_loras(model.config(), {{a, 1.0f}, {a, 2.0f}}); }, {"adapter 1 is adapter 0"});
    expect_error([&] { adapters.set_loras(model.config(), {{a, std::nanf("")}}); }, {"scale", "not finite"});
    ControlVector past = ControlVector::random(model.config(), 1, 1, 2);
    expect_error([&] { adapters.set_cvec(model.config(), past); }, {"[1, 2]", "0..1"});
    past.data.pop_back();
    past.end = 1;
    expect_error([&] { adapters.set_cvec(model.config(), past); }, {"63 floats", "64"});
    EXPECT_EQ(adapters.set_id(), id);
    ASSERT_EQ(adapters.loras().size(), 1u);
    EXPECT_EQ(adapters.loras()[0].scale, 1.0f);
    EXPECT_EQ(*adapters.cvec(), ControlVector::random(model.config(), 1, 1, 1));
    expect_error([] { LoraAdapter(tiny_config(), 0, 1.0f); }, {"rank 0", "1..256"});
}

TEST_F(AdapterContract, TheCudaBackendRefusesASetPastItsLimitNamingItAndDecodesNothing) {
    DecodeSession cuda(SessionOptions{.backend = Backend::cuda});
    std::vector<LoraUse> many;
    for (int i = 0; i <= kMaxCudaLoras; ++i) many.push_back({LoraAdapter::random(model.config(), 1, 1.0f, 10 + i), 1.0f});
    adapters.set_loras(model.config(), many);
    expect_error([&] { cuda.decode(model, cache, 1, adapters); },
                 {"backend=cuda", std::to_string(kMaxCudaLoras + 1) + " LoRA adapters", "at most " + std::to_string(kMaxCudaLoras)});
    EXPECT_EQ(cache.cached_len(), 0);
    EXPECT_FALSE(cuda.has_plan());
}

}  // namespace
}  // namespace kvweld
