#include "engine/ids.hpp"
#include "engine/kv_cache.hpp"
#include "engine/model.hpp"

#include <gtest/gtest.h>

#include <set>
#include <unordered_set>

namespace kvweld {
namespace {

TEST(Ids, StartAboveZeroAndNeverRepeat) {
    EXPECT_FALSE(KvAllocId{});
    std::set<std::uint64_t> seen;
    for (int i = 0; i < 1000; ++i) {
        const KvAllocId id = KvAllocId::mint();
        EXPECT_GE(id.get(), 1u);
        EXPECT_TRUE(seen.insert(id.get()).second);
    }
}

TEST(Ids, HashableAndComparable) {
    const ModelInstanceId a = ModelInstanceId::mint(), b = ModelInstanceId::mint();
    EXPECT_LT(a, b);
    EXPECT_NE(a, b);
    EXPECT_EQ(a, a);
    std::unordered_set<ModelInstanceId> set{a, b, a};
    EXPECT_EQ(set.size(), 2u);
}

// Dropping a cache or model never frees its id for reuse: the next one
// minted is strictly larger, even when the allocator hands back the same
// memory.
TEST(Ids, NotRecycledAfterDrop) {
    const ModelConfig cfg = tiny_config();
    KvAllocId last_alloc;
    ModelInstanceId last_model;
    StorageSerial last_serial;
    for (int i = 0; i < 50; ++i) {
        auto cache = KvCache::with_capacity(cfg);
        EXPECT_GT(cache.alloc_id(), last_alloc);
        EXPECT_GT(cache.storage_serials().front(), last_serial);
        last_alloc = cache.alloc_id();
        last_serial = cache.storage_serials().back();
        const Model model = Model::random(cfg, 7);
        EXPECT_GT(model.id(), last_model);
        last_model = model.id();
    }
}

TEST(Ids, ModelMoveKeepsIdentity) {
    Model a = Model::random(tiny_config(), 1);
    const ModelInstanceId id = a.id();
    Model b = std::move(a);
    EXPECT_EQ(b.id(), id);
}

}  // namespace
}  // namespace kvweld
