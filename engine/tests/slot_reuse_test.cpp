// The slot-reuse bug, shown directly. A plan is held across "retire A,
// admit B on a fresh same-shape cache". B's prompt is prefilled by a
// separate path (serving engines prefill with other kernels than the held
// decode graph), then the held plan decodes B.
#include "engine/decode_session.hpp"
#include "engine/faults.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

namespace kvweld {
namespace {

using testing::kCpuTolerance;
using testing::Shadow;

// Returns the worst logit distance from the reference over B's decodes.
double decode_b_after_a(const Model& model, FaultSet faults) {
    ScopedFaults scoped(faults);
    const int vocab = model.config().vocab;
    DecodeSession held;
    {
        auto cache_a = KvCache::with_capacity(model.config());
        for (int t : testing::random_tokens(40, vocab, 100)) held.decode(model, cache_a, t);
    }  // retire A: its cache is dropped (the held plan still pins the storage)

    auto cache_b = KvCache::with_capacity(model.config());
    Shadow shadow_b(model);
    DecodeSession prefill;
    for (int t : testing::random_tokens(30, vocab, 200)) {
        shadow_b.step(t);
        prefill.decode(model, cache_b, t);
    }
    double worst = 0.0;
    for (int t : testing::random_tokens(10, vocab, 300)) {
        const std::vector<float> expected = shadow_b.step(t);
        worst = std::max(worst, logit_error(held.decode(model, cache_b, t), expected));
    }
    return worst;
}

TEST(SlotReuse, WithTheKeyCheckBDecodesCorrectly) {
    const Model model = Model::random(tiny_config(), 77);
    EXPECT_LE(decode_b_after_a(model, {}), kCpuTolerance);
}

TEST(SlotReuse, WithTheKeyCheckBypassedBDecodesOverAsKv) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const Model model = Model::random(tiny_config(), 77);
    FaultSet bypass;
    bypass.add(Fault::geometry_only_key);
    const double separation = decode_b_after_a(model, bypass);
    RecordProperty("stale_separation", std::to_string(separation));
    std::printf("stale decode separation: max |logit - reference| = %.4g (tolerance %.0e)\n",
                separation, kCpuTolerance);
    EXPECT_GT(separation, 100 * kCpuTolerance);
}

}  // namespace
}  // namespace kvweld
