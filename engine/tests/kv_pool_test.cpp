// KvPool and PagedSequence: blocks, references, copy on write, truncate,
// exhaustion, grow and reset, and the pool identity across all of them;
// both halves: what must keep the id keeps it, what must replace it does.
#include "util/error.hpp"
#include "engine/kv_pool.hpp"

#include <gtest/gtest.h>

namespace kvweld {
namespace {

KvGeometry geometry() { return KvGeometry{.n_layers = 2, .n_kv_heads = 1, .head_dim = 4, .max_seq_len = 0}; }

// Writes `value` into every K and V lane of position `pos` of `s` (which must hold it).
void write(KvPool& pool, const PagedSequence& s, int pos, float value) {
    const auto [b, o] = s.locate(pool, pos);
    for (int l = 0; l < pool.n_layers(); ++l)
        for (int i = 0; i < pool.kv_dim(); ++i) pool.key(l, b, o)[i] = pool.value(l, b, o)[i] = value;
}

float read(const KvPool& pool, const PagedSequence& s, int pos, int layer = 1) {
    const auto [b, o] = s.locate(pool, pos);
    return pool.value(layer, b, o)[0];
}

PagedSequence filled(KvPool& pool, int n, float base) {
    PagedSequence s;
    for (int p = 0; p < n; ++p) {
        EXPECT_TRUE(s.append(pool).has_value());
        write(pool, s, p, base + float(p));
    }
    return s;
}

TEST(KvPool, BlocksComeAndGoWithoutChangingTheId) {
    KvPool pool(geometry(), 4, 8);
    const KvAllocId id = pool.alloc_id();
    PagedSequence a = filled(pool, 9, 0.0f);  // three blocks: 4 + 4 + 1
    EXPECT_EQ(a.table().size(), 3u);
    EXPECT_EQ(pool.free_blocks(), 5);
    a.truncate_to(pool, 4);  // the third block goes back, the second too (position 4 was its first)
    EXPECT_EQ(a.table().size(), 1u);
    EXPECT_EQ(pool.free_blocks(), 7);
    EXPECT_EQ(read(pool, a, 3), 3.0f);
    a.release_all(pool);
    EXPECT_EQ(pool.free_blocks(), 8);
    EXPECT_EQ(pool.alloc_id(), id);  // admit, append, truncate, retire: the same pool
}

TEST(KvPool, ForkSharesThePrefixAndCopiesOnWrite) {
    KvPool pool(geometry(), 4, 8);
    PagedSequence a = filled(pool, 6, 10.0f);  // blocks: full, half
    PagedSequence b = a.fork(pool);
    EXPECT_EQ(pool.refcount(a.table()[0]), 2);
    EXPECT_EQ(pool.refcount(a.table()[1]), 2);
    // b writes position 6, inside the shared second block: it gets a copy.
    ASSERT_TRUE(b.append(pool).has_value());
    write(pool, b, 6, 99.0f);
    EXPECT_NE(b.table()[1], a.table()[1]);
    EXPECT_EQ(b.table()[0], a.table()[0]);  // the full block stays shared
    EXPECT_EQ(pool.refcount(a.table()[1]), 1);
    EXPECT_EQ(read(pool, b, 5), 15.0f);     // the copy holds the prefix
    EXPECT_EQ(read(pool, b, 6), 99.0f);
    ASSERT_TRUE(a.append(pool).has_value());  // a's own block is no longer shared: written in place
    write(pool, a, 6, 7.0f);
    EXPECT_EQ(read(pool, a, 6), 7.0f);
    EXPECT_EQ(read(pool, b, 6), 99.0f);     // neither sees the other's write
}

TEST(KvPool, ExhaustionIsAnAnswerAndChangesNothing) {
    KvPool pool(geometry(), 2, 2);
    PagedSequence a = filled(pool, 4, 0.0f);
    const PagedSequence before = a;
    EXPECT_FALSE(a.append(pool).has_value());
    EXPECT_EQ(a.length(), before.length());
    EXPECT_EQ(a.table(), before.table());
    // A shared, half-full block cannot be copied either: still nothing changes.
    KvPool small(geometry(), 4, 1);
    PagedSequence c = filled(small, 2, 0.0f);
    PagedSequence d = c.fork(small);
    EXPECT_FALSE(d.append(small).has_value());
    EXPECT_EQ(small.refcount(c.table()[0]), 2);
}

TEST(KvPool, GrowAndResetReplaceTheStorageAndTheId) {
    KvPool pool(geometry(), 4, 2);
    PagedSequence a = filled(pool, 8, 1.0f);
    const KvAllocId id = pool.alloc_id();
    pool.grow(4);
    EXPECT_NE(pool.alloc_id(), id);
    EXPECT_EQ(read(pool, a, 7), 8.0f);  // content and block numbers kept
    EXPECT_EQ(read(pool, a, 2, 0), 3.0f);
    EXPECT_EQ(pool.free_blocks(), 2);
    PagedSequence b = filled(pool, 5, 0.0f);
    EXPECT_EQ(b.table()[0], 2);  // the lowest free block first
    const KvAllocId grown = pool.alloc_id();
    pool.reset();
    EXPECT_NE(pool.alloc_id(), grown);
    EXPECT_EQ(pool.free_blocks(), 4);
}

TEST(KvPool, BadInputIsAnErrorNamingTheValue) {
    auto expect_error = [](auto&& fn, const std::string& fragment) {
        try {
            fn();
            ADD_FAILURE() << "expected an Error with " << fragment;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
        }
    };
    expect_error([] { KvPool(geometry(), 3, 4); }, "block size 3: must be a power of two");
    expect_error([] { KvPool(geometry(), 4, 0); }, "0 blocks: must be >= 1");
    expect_error([] { KvPool(KvGeometry{.n_layers = 64, .n_kv_heads = 64, .head_dim = 128}, 1024, 1 << 20); },
                 "more than the limit");
    KvPool pool(geometry(), 4, 2);
    expect_error([&] { pool.release(1); }, "block 1 is free");
    expect_error([&] { pool.retain(7); }, "block 7 out of range 0..1");
    expect_error([&] { pool.grow(2); }, "must be more than the 2");
    PagedSequence a = filled(pool, 3, 0.0f);
    expect_error([&] { a.truncate_to(pool, 4); }, "truncate_to(4): must be in 0..3");
    expect_error([&] { a.locate(pool, 3); }, "position 3 out of range 0..2");
    EXPECT_EQ(a.length(), 3);  // the refused calls changed nothing
}

}  // namespace
}  // namespace kvweld
