// The paged CUDA plan: one captured graph serves every sequence of a KV
// pool, reading the block table from a fixed device buffer filled before
// each launch. Against the reference, and both halves of the contract:
// fork, truncate and compaction keep the graph; a pool grow rebinds it by
// node parameter update (no re-capture); the pool's data moves (copy on
// write, compaction, grow) act on the device copy.
#include "cuda_test_util.hpp"
#include "engine/cuda/cuda_plan.hpp"
#include "engine/reference.hpp"
#include "util/rng.hpp"

#include <map>

namespace kvweld::cuda {
namespace {


struct PagedRun {
    explicit PagedRun(const Model& m, int block, int blocks)
        : model(&m), pool(KvGeometry::of(m.config()), block, blocks), session({.backend = Backend::cuda}) {}
    double step(int seq, int token) {
        auto [it, fresh] = shadows.try_emplace(seq, model->config());
        PagedSequence& s = seqs[seq];
        const std::vector<float> want = reference_forward(*model, it->second, token, s.length());
        return logit_error(session.decode(*model, pool, s, token), want);
    }
    void fork(int from, int to) {
        seqs[to] = seqs[from].fork(pool);
        shadows.insert_or_assign(to, shadows.at(from));
    }
    const Model* model;
    KvPool pool;
    DecodeSession session;
    std::map<int, PagedSequence> seqs;
    std::map<int, ReferenceKv> shadows;
};

TEST(CudaPaged, OneGraphServesInterleavedForkedAndTruncatedSequences) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const Model model = Model::random(tiny_config(), 5);
    PagedRun r(model, 4, 64);
    Rng rng(3);
    double worst = 0.0;
    for (int i = 0; i < 30; ++i)
        for (int s : {0, 1}) worst = std::max(worst, r.step(s, int(rng.below(model.config().vocab))));
    r.fork(1, 2);  // shares 1's blocks; the next write into the shared last block copies it on the device
    for (int i = 0; i < 10; ++i)
        for (int s : {1, 2}) worst = std::max(worst, r.step(s, int(rng.below(model.config().vocab))));
    r.seqs[0].truncate_to(r.pool, 9);
    std::vector<PagedSequence*> live;
    for (auto& [id, s] : r.seqs) live.push_back(&s);
    r.pool.compact(live);  // moves blocks on the device too
    for (int i = 0; i < 10; ++i)
        for (int s : {0, 1, 2}) worst = std::max(worst, r.step(s, int(rng.below(model.config().vocab))));
    EXPECT_LE(worst, kDataTolerance);
    EXPECT_EQ(r.session.counters().builds, 1u);
    EXPECT_EQ(r.session.counters().rebinds, 0u);
}

TEST(CudaPaged, PoolGrowRebindsTheGraphAndTheDeviceContentFollows) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const Model model = Model::random(tiny_config(), 6);
    PagedRun r(model, 4, 3);
    Rng rng(4);
    double worst = 0.0;
    for (int i = 0; i < 12; ++i) worst = std::max(worst, r.step(0, int(rng.below(model.config().vocab))));
    const auto* plan = dynamic_cast<const CudaPlan*>(r.session.plan());
    ASSERT_NE(plan, nullptr);
    const std::size_t nodes = plan->graph_nodes();
    const std::vector<StorageSerial> welded = r.session.bound_serials();
    r.pool.grow(6);  // reads the device copy back first: the new storage starts from it
    for (int i = 0; i < 8; ++i) worst = std::max(worst, r.step(0, int(rng.below(model.config().vocab))));
    EXPECT_LE(worst, kDataTolerance);
    EXPECT_EQ(r.session.counters().builds, 1u);
    EXPECT_EQ(r.session.counters().rebinds, 1u);
    EXPECT_EQ(r.session.plan(), plan);  // the same graph, its nodes re-pointed
    EXPECT_EQ(plan->graph_nodes(), nodes);
    EXPECT_NE(r.session.bound_serials(), welded);
    // The rows the graph wrote are in the pool's device copy: read back, they are the reference's.
    r.pool.download();
    const ReferenceKv& want = r.shadows.at(0);
    const int kv_dim = model.config().kv_dim();
    for (int pos = 0; pos < r.seqs[0].length(); ++pos) {
        const auto [block, offset] = r.seqs[0].locate(r.pool, pos);
        const std::vector<float> got(r.pool.key(1, block, offset), r.pool.key(1, block, offset) + kv_dim);
        const std::vector<float> ref(want.key[1].begin() + pos * kv_dim, want.key[1].begin() + (pos + 1) * kv_dim);
        EXPECT_LE(logit_error(got, ref), kDataTolerance) << "position " << pos;
    }
}

}  // namespace
}  // namespace kvweld::cuda
