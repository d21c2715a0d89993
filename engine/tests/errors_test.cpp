// Bad input gets an Error naming the value and the limit, and nothing
// already held changes.
#include "engine/decode_session.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace kvweld {
namespace {

using testing::expect_error;

class Errors : public ::testing::Test {
protected:
    void SetUp() override {
        for (int t : {1, 2, 3}) session.decode(model, cache, t);
    }
    // Nothing held may change across a refused call.
    void expect_unchanged() {
        EXPECT_EQ(cache.cached_len(), 3);
        EXPECT_EQ(cache.alloc_id(), alloc);
        EXPECT_EQ(session.counters().decodes(), 3u);
        EXPECT_EQ(session.bound_serials(), cache.storage_serials());
    }
    Model model = Model::random(tiny_config(), 3);
    KvCache cache = KvCache::with_capacity(model.config());
    DecodeSession session;
    KvAllocId alloc = cache.alloc_id();
};

TEST_F(Errors, TokenOutOfRange) {
    expect_error([&] { session.decode(model, cache, 64); }, {"token 64", "vocab_size is 64"});
    expect_error([&] { session.decode(model, cache, -1); }, {"token -1", "64"});
    expect_unchanged();
}

TEST_F(Errors, TruncatePastCachedLen) {
    expect_error([&] { cache.truncate_to(4); }, {"truncate_to(4)", "cached_len = 3"});
    expect_error([&] { cache.truncate_to(-1); }, {"truncate_to(-1)"});
    expect_unchanged();
}

TEST_F(Errors, SetLayerOfTheWrongShape) {
    expect_error([&] { cache.set_layer(0, std::make_shared<KvStorage>(256, 12)); },
                 {"256 x 12", "256 x 16"});
    expect_error([&] { cache.set_layer(5, cache.layer(0)->copy()); }, {"layer index 5", "2 layers"});
    expect_unchanged();
}

TEST_F(Errors, CacheThatDoesNotFitTheModel) {
    ModelConfig wide = model.config();
    wide.n_kv_heads = 4;
    auto other = KvCache::with_capacity(wide);
    expect_error([&] { session.decode(model, other, 1); }, {"KV width 32", "16"});
    ModelConfig deep = model.config();
    deep.n_layers = 3;
    auto deeper = KvCache::with_capacity(deep);
    expect_error([&] { session.decode(model, deeper, 1); }, {"3 layers", "2"});
    expect_unchanged();
}

TEST_F(Errors, FullCache) {
    KvGeometry g = KvGeometry::of(model.config());
    g.max_seq_len = 4;
    auto small = KvCache::with_capacity(g);
    DecodeSession s;
    for (int t : {1, 2, 3, 4}) s.decode(model, small, t);
    expect_error([&] { s.decode(model, small, 5); }, {"cache full", "position 4", "max_seq_len 4"});
    EXPECT_EQ(small.cached_len(), 4);
    EXPECT_EQ(s.counters().decodes(), 4u);
}

TEST_F(Errors, ModelTooLargeIsRefusedBeforeAllocating) {
    ModelConfig c = tiny_config();
    c.vocab = 1 << 22;
    c.dim = 1 << 12;
    c.n_heads = 1 << 9;
    c.n_kv_heads = 1 << 9;
    expect_error([&] { Model::random(c, 1); }, {"weights", "bytes", "limit"});
}

TEST_F(Errors, NonFiniteLogitsAreTheWorstError) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> want = {1.0f, 2.0f}, got = {1.0f, nan};
    EXPECT_FALSE(logit_error(got, want) <= 1e-4);  // a NaN must never pass the oracle
    EXPECT_EQ(logit_error(want, want), 0.0);
}

TEST_F(Errors, CheckWithoutPlan) {
    DecodeSession empty;
    expect_error([&] { empty.check(model, cache); }, {"no plan"});
}

TEST_F(Errors, UnknownBackend) {
    expect_error([] { backend_from_string("tpu"); }, {"tpu", "cpu"});
    expect_unchanged();
}

// Without a device (or without nvcc at build time) the CUDA backend is a
// clear error, and the cache it was handed is untouched.
TEST_F(Errors, UnavailableCudaBackend) {
    std::string why;
    if (cuda_backend_available(&why)) GTEST_SKIP() << "a CUDA device is present";
    DecodeSession cuda({.backend = Backend::cuda});
    expect_error([&] { cuda.decode(model, cache, 1); }, {"CUDA backend unavailable", why});
    expect_unchanged();
}

}  // namespace
}  // namespace kvweld
