// Context shift and state save/load in kvweld's engine (engine/kv_cache.hpp,
// engine/kv_state.hpp): both halves of the contract row (the plan is kept,
// the rows are right), the faults, and every refusal.
#include "engine/kv_state.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

namespace kvweld {
namespace {

using testing::expect_error;
using testing::kCpuTolerance;
using testing::only;
using testing::random_tokens;

// A request decoded by one session over one cache, with the reference's
// shadow following it (the same shifts, rotated afresh from raw keys).
struct Request {
    explicit Request(const ModelConfig& c, std::uint64_t seed = 7) : model(Model::random(c, seed)) {}
    double decode(int token) {
        const std::span<const float> got = session.decode(model, cache, token);
        return logit_error(got, reference_forward(model, shadow, token, cache.cached_len() - 1));
    }
    void prefill(int n, std::uint64_t seed = 5) {
        for (int t : random_tokens(n, model.config().vocab, seed)) ASSERT_LE(decode(t), kCpuTolerance);
    }
    void shift(int p0, int p1) {
        shadow.shift(model.config(), p0, p1, cache.cached_len());
        cache.shift(p0, p1);
    }
    Model model;
    KvCache cache = KvCache::with_capacity(model.config());
    DecodeSession session;
    ReferenceKv shadow{model.config()};
};

// Layer 0's keys depend on the token and the position only, so a moved
// row re-rotated by the shift must be the row the same token decoded at the
// new position writes, up to the rounding of composing two rotations. The
// tolerance is set from the error measured here on both families (printed):
// 4.8e-7 (llama) and 2.4e-7 (qwen3), a few float ulps of keys of order 1;
// 2e-6 leaves room for other CPUs' rounding, and a rotation skipped or
// owed twice is off by the key's own size.
TEST(ContextShift, MovedKeysMatchTheKeysDecodedAtTheNewPositions) {
    for (Family family : {Family::llama, Family::qwen3}) {
        Request shifted(tiny_config(family));
        const std::vector<int> tokens = random_tokens(60, shifted.model.config().vocab, 11);
        for (int t : tokens) shifted.decode(t);
        shifted.cache.shift(4, 25);  // keep 4, drop 21, move 35 rows down
        shifted.cache.settle(shifted.model.config().rope_theta);
        Request fresh(tiny_config(family));
        std::vector<int> kept(tokens.begin(), tokens.begin() + 4);
        kept.insert(kept.end(), tokens.begin() + 25, tokens.end());
        for (int t : kept) fresh.decode(t);
        ASSERT_EQ(shifted.cache.cached_len(), fresh.cache.cached_len());
        const int kv_dim = shifted.model.config().kv_dim();
        double worst = 0.0;
        for (int pos = 0; pos < fresh.cache.cached_len(); ++pos)
            for (int i = 0; i < kv_dim; ++i)
                worst = std::max(worst, double(std::fabs(shifted.cache.layer(0)->key_row(pos)[i] -
                                                         fresh.cache.layer(0)->key_row(pos)[i])));
        std::printf("  %s: worst key error after the shift %.3g\n", std::string(to_string(family)).c_str(), worst);
        EXPECT_LE(worst, 2e-6);
        EXPECT_GT(worst, 0.0) << "a composed rotation that rounds nothing: the test would not see a skipped one";
        // Values are moved, never recomputed: bit for bit.
        EXPECT_EQ(std::memcmp(shifted.cache.layer(0)->value_row(4), fresh.cache.layer(0)->value_row(4),
                              sizeof(float) * std::size_t(kv_dim) * 35),
                  0);
    }
}

// Both halves: the plan is kept (same storage, same id) and every later
// row agrees with the reference over the shifted history.
TEST(ContextShift, KeepsThePlanAndDecodesRight) {
    Request r(tiny_config());
    r.prefill(30);
    const KvAllocId id = r.cache.alloc_id();
    const auto serials = r.cache.storage_serials();
    const std::uint64_t builds = r.session.counters().builds, kept = r.session.counters().kept;
    r.shift(3, 17);
    EXPECT_EQ(r.cache.cached_len(), 16);
    EXPECT_EQ(r.cache.alloc_id(), id);
    EXPECT_EQ(r.cache.storage_serials(), serials);
    EXPECT_EQ(r.session.check(r.model, r.cache).kind, Validity::Kind::valid);
    for (int t : random_tokens(10, r.model.config().vocab, 3)) EXPECT_LE(r.decode(t), kCpuTolerance);
    EXPECT_EQ(r.session.counters().builds, builds);
    EXPECT_EQ(r.session.counters().kept, kept + 10);
}

// Two shifts before a decode owe the sum of their rotations.
TEST(ContextShift, RotationsOwedAddUp) {
    Request r(tiny_config());
    r.prefill(40);
    r.shift(2, 10);
    r.shift(0, 5);
    EXPECT_FALSE(r.cache.settled());
    for (int t : random_tokens(5, r.model.config().vocab, 4)) EXPECT_LE(r.decode(t), kCpuTolerance);
    EXPECT_TRUE(r.cache.settled());
}

// Each fault is seen, and by the half it breaks.
TEST(ContextShift, FaultsAreCaught) {
    if (!kFaultsCompiled) GTEST_SKIP() << "this build has no fault switches (KVWELD_FAULTS)";
    {
        const ScopedFaults on(only(Fault::shift_rotation_skipped));
        Request r(tiny_config());
        r.prefill(20);
        r.shift(2, 9);
        EXPECT_GT(r.decode(1), 1e-3) << "keys left rotated for their old positions must move the logits";
    }
    {
        const ScopedFaults on(only(Fault::shift_delta_overwritten));
        Request r(tiny_config());
        r.prefill(30);
        r.shift(2, 9);
        r.shift(0, 4);
        EXPECT_GT(r.decode(1), 1e-3) << "the first shift's rotation, forgotten, must move the logits";
    }
    {
        const ScopedFaults on(only(Fault::shift_remints_id));
        Request r(tiny_config());
        r.prefill(20);
        r.shift(2, 9);
        EXPECT_EQ(r.session.check(r.model, r.cache).kind, Validity::Kind::allocation_changed);
        EXPECT_LE(r.decode(1), kCpuTolerance);  // right rows, a plan moved for nothing
        EXPECT_EQ(r.session.counters().rebinds, 1u);
    }
}

TEST(ContextShift, BadBoundsChangeNothing) {
    Request r(tiny_config());
    r.prefill(10);
    const KvAllocId id = r.cache.alloc_id();
    expect_error([&] { r.cache.shift(3, 11); }, {"[3, 11)", "cached_len = 10"});
    expect_error([&] { r.cache.shift(5, 4); }, {"[5, 4)", "p0 <= p1"});
    expect_error([&] { r.cache.shift(-1, 2); }, {"[-1, 2)"});
    EXPECT_EQ(r.cache.cached_len(), 10);
    EXPECT_EQ(r.cache.alloc_id(), id);
    EXPECT_TRUE(r.cache.settled());
    r.cache.shift(4, 4);  // an empty range: nothing to do
    EXPECT_EQ(r.cache.cached_len(), 10);
}

std::uint64_t digest(const Model& m) { return weight_digest(m); }

// A state exported from one request and imported into another engine's
// cache decodes on bit for bit, into the importer's own storage (plan kept).
TEST(KvState, RoundTripIntoOtherStorageKeepsThePlan) {
    Request from(tiny_config());
    from.prefill(12);
    from.shift(1, 4);
    from.cache.settle(from.model.config().rope_theta);
    const std::vector<std::uint8_t> bytes = export_kv_state(from.cache, digest(from.model));
    EXPECT_EQ(bytes.size(), kKvStateHeaderBytes + 2 * 2 * 9 * std::size_t(from.model.config().kv_dim()) * 4);

    Request to(tiny_config());
    to.prefill(5, 99);  // its plan is built on its own storage
    const KvAllocId id = to.cache.alloc_id();
    const std::uint64_t builds = to.session.counters().builds;
    import_kv_state(to.cache, bytes, digest(to.model));
    EXPECT_EQ(to.cache.cached_len(), 9);
    EXPECT_EQ(to.cache.alloc_id(), id);
    const std::span<const float> a = from.session.decode(from.model, from.cache, 3);
    const std::vector<float> want(a.begin(), a.end());
    const std::span<const float> b = to.session.decode(to.model, to.cache, 3);
    EXPECT_EQ(std::vector<float>(b.begin(), b.end()), want);
    EXPECT_EQ(to.session.counters().builds, builds);
}

TEST(KvState, RefusalsNameWhyAndChangeNothing) {
    Request r(tiny_config());
    r.prefill(6);
    const std::vector<std::uint8_t> good = export_kv_state(r.cache, digest(r.model));
    Request target(tiny_config());
    target.prefill(3, 42);
    const auto unchanged = [&] {
        EXPECT_EQ(target.cache.cached_len(), 3);
        EXPECT_LE(target.decode(5), kCpuTolerance);
        target.cache.truncate_to(3);  // the shadow's row 3 is written again by the next decode
    };
    const std::uint64_t d = digest(target.model);
    expect_error([&] { import_kv_state(target.cache, std::span(good).first(20), d); }, {"20 bytes", "32-byte header"});
    unchanged();
    expect_error([&] { import_kv_state(target.cache, std::span(good).first(good.size() - 4), d); },
                 {std::to_string(good.size() - 4) + " bytes", std::to_string(good.size())});
    unchanged();
    expect_error([&] { import_kv_state(target.cache, good, d + 1); }, {"another model"});
    unchanged();
    std::vector<std::uint8_t> bad = good;
    bad[0] = 'X';
    expect_error([&] { import_kv_state(target.cache, bad, d); }, {"KVWS"});
    bad = good;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bad.data() + kKvStateHeaderBytes + 8, &nan, 4);
    expect_error([&] { import_kv_state(target.cache, bad, d); }, {"value 2", "not finite"});
    unchanged();
    ModelConfig wide = tiny_config();
    wide.n_kv_heads = wide.n_heads;
    KvCache wide_cache = KvCache::with_capacity(wide);
    expect_error([&] { import_kv_state(wide_cache, good, d); }, {"another shape", "kv_dim"});
    KvGeometry small = KvGeometry::of(target.model.config());
    small.max_seq_len = 4;
    KvCache short_cache = KvCache::with_capacity(small);
    expect_error([&] { import_kv_state(short_cache, good, d); }, {"6 positions", "at most 4"});
    EXPECT_EQ(short_cache.cached_len(), 0);
}

// A cache owing rotations is not exported as it is: the rows would not be
// the rows its plans read.
TEST(KvState, ExportRefusesAnUnsettledCache) {
    Request r(tiny_config());
    r.prefill(8);
    r.cache.shift(0, 3);
    expect_error([&] { export_kv_state(r.cache, 1); }, {"settle"});
}

}  // namespace
}  // namespace kvweld
