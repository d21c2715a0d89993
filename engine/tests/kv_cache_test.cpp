#include "engine/kv_cache.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

namespace kvweld {
namespace {

using testing::expect_error;

TEST(KvCache, FreshCacheIsEmptyWithDistinctSerials) {
    const auto cache = KvCache::with_capacity(tiny_config());
    EXPECT_EQ(cache.cached_len(), 0);
    EXPECT_TRUE(cache.alloc_id());
    const auto serials = cache.storage_serials();
    ASSERT_EQ(serials.size(), 2u);
    EXPECT_NE(serials[0], serials[1]);
}

TEST(KvCache, ClearReplacesStorageAndMintsId) {
    auto cache = KvCache::with_capacity(tiny_config());
    cache.advance();
    cache.layer(0)->key_row(0)[0] = 5.0f;
    const KvAllocId before = cache.alloc_id();
    const auto serials = cache.storage_serials();
    cache.clear();
    EXPECT_NE(cache.alloc_id(), before);
    EXPECT_EQ(cache.cached_len(), 0);
    for (std::size_t i = 0; i < serials.size(); ++i) EXPECT_NE(cache.storage_serials()[i], serials[i]);
    EXPECT_EQ(cache.layer(0)->key_row(0)[0], 0.0f);
}

TEST(KvCache, SetLayerReplacesOneLayerAndMintsId) {
    auto cache = KvCache::with_capacity(tiny_config());
    const KvAllocId before = cache.alloc_id();
    const auto serials = cache.storage_serials();
    cache.set_layer(1, cache.layer(1)->copy());
    EXPECT_NE(cache.alloc_id(), before);
    EXPECT_EQ(cache.storage_serials()[0], serials[0]);
    EXPECT_NE(cache.storage_serials()[1], serials[1]);
}

TEST(KvCache, TruncateKeepsIdAndStorage) {
    auto cache = KvCache::with_capacity(tiny_config());
    for (int i = 0; i < 5; ++i) cache.advance();
    const KvAllocId before = cache.alloc_id();
    const auto serials = cache.storage_serials();
    cache.truncate_to(2);
    EXPECT_EQ(cache.cached_len(), 2);
    EXPECT_EQ(cache.alloc_id(), before);
    EXPECT_EQ(cache.storage_serials(), serials);
    cache.truncate_to(2);  // n == cached_len is allowed
    EXPECT_EQ(cache.alloc_id(), before);
}

TEST(KvCache, CopyHasSameContentNewSerial) {
    auto cache = KvCache::with_capacity(tiny_config());
    cache.layer(0)->value_row(3)[1] = 2.5f;
    const KvLayer copy = cache.layer(0)->copy();
    EXPECT_EQ(copy->value_row(3)[1], 2.5f);
    EXPECT_NE(copy->serial(), cache.layer(0)->serial());
}

TEST(KvCache, ImpossibleGeometryIsRefusedBeforeAllocating) {
    KvGeometry g = KvGeometry::of(tiny_config());
    g.max_seq_len = (1 << 20) + 1;
    expect_error([&] { KvCache::with_capacity(g); }, {"max_seq_len", "1048577", "1048576"});
    g = KvGeometry::of(tiny_config());
    g.n_layers = 0;
    expect_error([&] { KvCache::with_capacity(g); }, {"n_layers", "0"});
    g = KvGeometry::of(tiny_config());
    g.head_dim = -2;
    expect_error([&] { KvCache::with_capacity(g); }, {"head_dim", "-2"});
}

// Every dimension in range, their product not: refused by size, naming it.
TEST(KvCache, OversizedProductIsRefusedBeforeAllocating) {
    const KvGeometry g{1024, 1024, 4096, 1 << 20, Dtype::f32};  // 2^52 floats per K or V
    expect_error([&] { KvCache::with_capacity(g); }, {"bytes", "limit", "1048576"});
    expect_error([] { KvStorage(1 << 20, 1 << 16); }, {"KvStorage", "bytes", "limit"});
    expect_error([] { KvStorage(0, 8); }, {"KvStorage", "positive"});
    // The other half: a cache just under the limit's scale is still fine to describe.
    EXPECT_LE(KvGeometry::of(config_by_name("110m")).bytes(), kMaxCacheBytes);
}

TEST(KvCache, AppendPastCapacityIsAnError) {
    KvGeometry g = KvGeometry::of(tiny_config());
    g.max_seq_len = 3;
    auto cache = KvCache::with_capacity(g);
    for (int i = 0; i < 3; ++i) cache.advance();
    expect_error([&] { cache.advance(); }, {"cache full", "3"});
    EXPECT_EQ(cache.cached_len(), 3);
}

}  // namespace
}  // namespace kvweld
