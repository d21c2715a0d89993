// The paged plan: one held plan serves every sequence of a KV pool, reading
// K/V through each step's block table. It decodes what the reference
// forward computes (and, bit for bit, what the dense plan computes), keeps
// the plan across admit, retire, fork, truncate and compaction, and moves
// it only on a pool grow or reset (AllocationChanged) or a new model.
#include "engine/cpu_kernels.hpp"
#include "engine/decode_session.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <map>

namespace kvweld {
namespace {

using testing::kCpuTolerance;
using testing::Shadow;

ModelConfig small_gqa() {
    ModelConfig c = tiny_config();
    c.n_kv_heads = c.n_heads / 2;  // grouped-query attention: the head offset into a row matters
    return c;
}

KvPool pool_for(const Model& m, int block, int blocks) { return KvPool(KvGeometry::of(m.config()), block, blocks); }

struct Case {
    int block;
    int threads;
};

class PagedDecode : public ::testing::TestWithParam<Case> {};

// Three interleaved sequences, a fork, truncations and a retire: every
// step's logits match the reference over that sequence's own history and
// equal the dense plan's bit for bit; one plan serves all of it.
TEST_P(PagedDecode, InterleavedSequencesMatchTheReferenceWithOnePlan) {
    const Model model = Model::random(small_gqa(), 3);
    KvPool pool = pool_for(model, GetParam().block, 256 / GetParam().block + 8);
    DecodeSession paged({.threads = GetParam().threads});
    std::map<int, PagedSequence> seqs;
    std::map<int, Shadow> shadows;
    std::map<int, KvCache> dense;  // the dense plan's view of the same history
    std::map<int, DecodeSession> dense_sessions;
    const std::vector<int> tokens = testing::random_tokens(400, model.config().vocab, 5);
    double worst = 0.0;
    std::size_t fed = 0;
    auto feed = [&](int s) {
        const int token = tokens[fed++ % tokens.size()];
        const std::vector<float> want = shadows.at(s).step(token);
        const std::span<const float> got = paged.decode(model, pool, seqs.at(s), token);
        worst = std::max(worst, logit_error(got, want));
        const std::vector<float> paged_row(got.begin(), got.end());
        const std::span<const float> dense_row = dense_sessions[s].decode(model, dense.at(s), token);
        ASSERT_TRUE(std::equal(paged_row.begin(), paged_row.end(), dense_row.begin())) << "sequence " << s;
    };
    auto open = [&](int s) {
        seqs.emplace(s, PagedSequence{});
        shadows.emplace(s, Shadow(model));
        dense.emplace(s, KvCache::with_capacity(model.config()));
    };
    for (int s : {0, 1, 2}) open(s);
    for (int round = 0; round < 20; ++round)
        for (int s : {0, 1, 2}) feed(s);
    // Fork 1 into 3: shared prefix blocks, copy on write at the next token.
    seqs.emplace(3, seqs.at(1).fork(pool));
    shadows.emplace(3, shadows.at(1));
    KvCache copy = KvCache::with_capacity(model.config());
    for (int l = 0; l < copy.n_layers(); ++l) copy.set_layer(l, dense.at(1).layer(l)->copy());
    for (int i = 0; i < dense.at(1).cached_len(); ++i) copy.advance();
    dense.emplace(3, std::move(copy));
    for (int round = 0; round < 9; ++round)
        for (int s : {1, 3}) feed(s);
    // Rewind 0 into the middle of a block, retire 2, compact, go on.
    seqs.at(0).truncate_to(pool, 13);
    shadows.at(0).truncate_to(13);
    dense.at(0).truncate_to(13);
    seqs.at(2).release_all(pool);
    seqs.erase(2);
    std::vector<PagedSequence*> live;
    for (auto& [id, s] : seqs) live.push_back(&s);
    const KvAllocId before = pool.alloc_id();
    pool.compact(live);
    EXPECT_EQ(pool.alloc_id(), before);
    EXPECT_EQ(block_ledger_violation(pool, live), std::nullopt);
    for (int round = 0; round < 7; ++round)
        for (int s : {0, 1, 3}) feed(s);
    EXPECT_LE(worst, kCpuTolerance);
    EXPECT_EQ(paged.counters().builds, 1u);
    EXPECT_EQ(paged.counters().rebinds, 0u);
    EXPECT_EQ(paged.counters().kept, fed - 1);
}

INSTANTIATE_TEST_SUITE_P(BlocksAndThreads, PagedDecode,
                         ::testing::Values(Case{1, 1}, Case{4, 1}, Case{16, 1}, Case{16, 3}, Case{8, 2}),
                         [](const auto& info) {
                             return "block" + std::to_string(info.param.block) + "_t" + std::to_string(info.param.threads);
                         });

// Both halves: a grow (new storage, new id) moves the plan by a rebind, and
// so does a reset; a new model rebuilds it; compaction and a fork keep it.
TEST(PagedPlan, OnlyANewStorageOrModelMovesThePlan) {
    const Model model = Model::random(tiny_config(), 1);
    KvPool pool = pool_for(model, 4, 2);
    DecodeSession session;
    PagedSequence a;
    Shadow shadow(model);
    const std::vector<int> tokens = testing::random_tokens(12, model.config().vocab, 2);
    for (int i = 0; i < 8; ++i) session.decode(model, pool, a, tokens[std::size_t(i)]), shadow.step(tokens[std::size_t(i)]);
    EXPECT_EQ(session.counters().builds, 1u);
    const std::vector<StorageSerial> welded = session.bound_serials();
    pool.grow(4);
    EXPECT_EQ(session.check(model, pool, a.length()).kind, Validity::Kind::allocation_changed);
    const std::vector<float> want = shadow.step(tokens[8]);
    EXPECT_LE(logit_error(session.decode(model, pool, a, tokens[8]), want), kCpuTolerance);
    EXPECT_EQ(session.counters().rebinds, 1u);
    EXPECT_EQ(session.counters().builds, 1u);
    EXPECT_NE(session.bound_serials(), welded);
    EXPECT_EQ(session.bound_serials().front(), pool.storage()->serial());
    PagedSequence b = a.fork(pool);
    std::vector<PagedSequence*> live{&a, &b};
    pool.compact(live);
    EXPECT_EQ(session.check(model, pool, b.length()).kind, Validity::Kind::valid);
    session.decode(model, pool, b, tokens[9]);
    EXPECT_EQ(session.counters().kept, 8u);
    const Model other = Model::random(tiny_config(), 1);  // same weights, another instance
    EXPECT_EQ(session.check(model, pool, 0).kind, Validity::Kind::valid);
    EXPECT_EQ(session.check(other, pool, 0).kind, Validity::Kind::stale);
    a.release_all(pool);
    b.release_all(pool);
    pool.reset();
    PagedSequence c;
    session.decode(other, pool, c, tokens[10]);
    EXPECT_EQ(session.counters().builds, 2u);
}

// A full pool is an Error naming it, and nothing changes: the sequence,
// the pool's free blocks, the plan and the counters.
TEST(PagedPlan, AFullPoolIsAnErrorThatChangesNothing) {
    const Model model = Model::random(tiny_config(), 1);
    KvPool pool = pool_for(model, 2, 1);
    DecodeSession session;
    PagedSequence a;
    Shadow shadow(model);
    session.decode(model, pool, a, 1), shadow.step(1);
    session.decode(model, pool, a, 2), shadow.step(2);
    const SessionCounters before = session.counters();
    testing::expect_error([&] { session.decode(model, pool, a, 3); },
                          {"KV pool exhausted", "all 1 blocks of 2 positions"});
    EXPECT_EQ(a.length(), 2);
    EXPECT_EQ(pool.free_blocks(), 0);
    EXPECT_EQ(session.counters().decodes(), before.decodes());
    testing::expect_error([&] { session.decode(model, pool, a, model.config().vocab); }, {"token", "out of range"});
    // Nothing held was lost: after a grow the sequence goes on, its earlier
    // rows intact, and the plan moves by a rebind.
    pool.grow(2);
    const std::vector<float> want = shadow.step(3);
    EXPECT_LE(logit_error(session.decode(model, pool, a, 3), want), kCpuTolerance);
    EXPECT_EQ(a.length(), 3);
    EXPECT_EQ(session.counters().rebinds, before.rebinds + 1);
    EXPECT_EQ(session.counters().builds, before.builds);
}

// The dense kernel is the paged one over a single block: the same bits.
TEST(PagedPlan, AttendBlocksEqualsAttendOverOneBlock) {
    const int hd = 8, kv_dim = 16, len = 37, block = 4;
    const std::vector<float> q = std::vector<float>(hd, 0.25f);
    std::vector<float> k(std::size_t(len) * kv_dim), v(k.size());
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = float(i % 13) * 0.1f, v[i] = float(i % 7) * -0.2f;
    std::vector<float> scores(len), want(hd), got(hd);
    cpu::attend(want.data(), scores.data(), q.data(), k.data() + hd, v.data() + hd, len, hd, kv_dim);
    std::vector<const float*> kb, vb;
    for (int t = 0; t < len; t += block) kb.push_back(k.data() + std::size_t(t) * kv_dim), vb.push_back(v.data() + std::size_t(t) * kv_dim);
    cpu::attend_blocks(got.data(), scores.data(), q.data(), kb.data(), vb.data(), block, hd, len, hd, kv_dim);
    EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace kvweld
