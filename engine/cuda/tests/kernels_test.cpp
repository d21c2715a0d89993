// Every CUDA kernel against its CPU reference (engine/cpu_kernels), on
// random inputs. Tolerances are fp32 relative 1e-5 unless a reduction order
// differs over many terms.
#include "cuda_test_util.hpp"
#include "engine/adapters.hpp"
#include "engine/cpu_kernels.hpp"
#include "engine/cuda/device_buffer.hpp"
#include "engine/cuda/kernels.cuh"
#include "engine/reference.hpp"
#include "util/rng.hpp"

#include <cmath>
#include <vector>

namespace kvweld::cuda {
namespace {

std::vector<float> random_vec(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (float& x : v) x = rng.symmetric(scale);
    return v;
}

DeviceBuffer<float> to_device(const std::vector<float>& v) {
    DeviceBuffer<float> d(v.size());
    d.upload(v.data(), v.size());
    return d;
}

std::vector<float> to_host(const DeviceBuffer<float>& d) {
    std::vector<float> v(d.size());
    d.download(v.data(), v.size());
    return v;
}

// The one metric of every oracle and test: logit_error (engine/reference.hpp).
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol) {
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LE(logit_error(got, want), tol);
}

DeviceBuffer<StepData> step_on_device(StepData s) {
    DeviceBuffer<StepData> d(1);
    d.upload(&s, 1);
    return d;
}

void sync() { KVWELD_CUDA_CHECK(cudaDeviceSynchronize()); }

TEST(CudaKernels, Embed) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const auto table = random_vec(10 * 24, 1);
    auto d_table = to_device(table);
    DeviceBuffer<float> x(24);
    auto step = step_on_device({7, 0, 1});
    KVWELD_CUDA_CHECK(launch_embed({d_table.get(), x.get(), step.get(), 24}, nullptr));
    sync();
    expect_close(to_host(x), std::vector<float>(table.begin() + 7 * 24, table.begin() + 8 * 24), 0);
}

TEST(CudaKernels, RmsNormGroupsAndInPlace) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const int n = 48, groups = 3;
    const auto x = random_vec(n * groups, 2), w = random_vec(n, 3);
    std::vector<float> want(x.size());
    for (int g = 0; g < groups; ++g) cpu::rmsnorm(&want[g * n], &x[g * n], w.data(), n, 1e-5f);
    auto d_x = to_device(x), d_w = to_device(w);
    KVWELD_CUDA_CHECK(launch_rmsnorm({d_x.get(), d_w.get(), d_x.get(), n, groups, 1e-5f}, nullptr));
    sync();
    expect_close(to_host(d_x), want, 1e-5);
}

TEST(CudaKernels, MatvecAlignedAndUnaligned) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    for (int cols : {288, 37}) {
        const int rows = 67;
        const auto w = random_vec(std::size_t(rows) * cols, 4), x = random_vec(cols, 5);
        std::vector<float> want(rows);
        cpu::matvec(want.data(), w.data(), x.data(), rows, cols);
        auto d_w = to_device(w), d_x = to_device(x);
        DeviceBuffer<float> out(rows);
        KVWELD_CUDA_CHECK(launch_matvec({d_w.get(), d_x.get(), out.get(), rows, cols}, nullptr));
        sync();
        expect_close(to_host(out), want, 1e-4);
    }
}

TEST(CudaKernels, RopeReadsItsRowFromStepData) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const int heads = 3, hd = 8, rows = 5;
    const auto v = random_vec(heads * hd, 6), table = random_vec(rows * hd, 7);
    std::vector<float> want = v;
    cpu::rope(want.data(), heads, hd, &table[3 * hd]);
    auto d_v = to_device(v), d_t = to_device(table);
    auto step = step_on_device({0, 3, 4});
    KVWELD_CUDA_CHECK(launch_rope({d_v.get(), d_t.get(), step.get(), heads, hd}, nullptr));
    sync();
    expect_close(to_host(d_v), want, 1e-6);
}

TEST(CudaKernels, KvWriteAtTheReboundOffset) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const int kv_dim = 16, rows = 6;
    const auto k = random_vec(kv_dim, 8), v = random_vec(kv_dim, 9);
    auto d_k = to_device(k), d_v = to_device(v);
    DeviceBuffer<float> kc(rows * kv_dim), vc(rows * kv_dim);
    KVWELD_CUDA_CHECK(cudaMemset(kc.get(), 0, kc.size() * sizeof(float)));
    KVWELD_CUDA_CHECK(cudaMemset(vc.get(), 0, vc.size() * sizeof(float)));
    auto step = step_on_device({0, 4, 5});
    KVWELD_CUDA_CHECK(launch_kv_write({d_k.get(), d_v.get(), kc.get(), vc.get(), step.get(), nullptr, 0, 0, kv_dim, -1, 0},
                                      nullptr));
    sync();
    const auto kh = to_host(kc), vh = to_host(vc);
    for (int i = 0; i < kv_dim; ++i) {
        EXPECT_EQ(kh[4 * kv_dim + i], k[i]);
        EXPECT_EQ(vh[4 * kv_dim + i], v[i]);
        EXPECT_EQ(kh[3 * kv_dim + i], 0.0f);  // other rows untouched
    }
}

TEST(CudaKernels, AttentionGqaOverTheMaskLength) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const int heads = 4, kv_heads = 2, hd = 8, rows = 40, len = 33, kv_dim = kv_heads * hd;
    const auto q = random_vec(heads * hd, 10), kc = random_vec(rows * kv_dim, 11), vc = random_vec(rows * kv_dim, 12);
    std::vector<float> want(heads * hd), scores(rows);
    for (int h = 0; h < heads; ++h) {
        const int kvh = h / (heads / kv_heads);
        cpu::attend(&want[h * hd], scores.data(), &q[h * hd], &kc[kvh * hd], &vc[kvh * hd], len, hd, kv_dim);
    }
    auto d_q = to_device(q), d_k = to_device(kc), d_v = to_device(vc);
    DeviceBuffer<float> out(heads * hd), d_scores(heads * rows);
    auto step = step_on_device({0, len - 1, len});
    KVWELD_CUDA_CHECK(launch_attention({d_q.get(), d_k.get(), d_v.get(), out.get(), d_scores.get(), step.get(), nullptr,
                                        0, 0, heads, heads / kv_heads, hd, kv_dim, rows, 0, 0}, nullptr));
    sync();
    expect_close(to_host(out), want, 1e-5);
}

// Paged KV: the rows of positions 0..len-1 live in blocks of 4 named by a
// device table, out of order; a table entry past the storage reads zeros
// and takes no write. Checked against the CPU's attend_blocks.
TEST(CudaKernels, PagedWriteAndAttentionGoThroughTheBlockTable) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const int heads = 4, kv_heads = 2, hd = 8, block = 4, n_blocks = 12, len = 30, kv_dim = kv_heads * hd;
    const std::vector<int> table = {7, 2, 11, 0, 5, 9, 1, 3};  // 8 blocks: 32 positions
    const auto q = random_vec(heads * hd, 20);
    const auto kp = random_vec(std::size_t(n_blocks * block * kv_dim), 21), vp = random_vec(kp.size(), 22);
    std::vector<const float*> kb, vb;
    for (int b : table) kb.push_back(&kp[std::size_t(b * block * kv_dim)]), vb.push_back(&vp[std::size_t(b * block * kv_dim)]);
    std::vector<float> want(heads * hd), scores(len);
    for (int h = 0; h < heads; ++h)
        cpu::attend_blocks(&want[h * hd], scores.data(), &q[h * hd], kb.data(), vb.data(), block,
                           (h / (heads / kv_heads)) * hd, len, hd, kv_dim);
    auto d_q = to_device(q), d_k = to_device(kp), d_v = to_device(vp);
    DeviceBuffer<int> d_table(table.size());
    d_table.upload(table.data(), table.size());
    DeviceBuffer<float> out(heads * hd), d_scores(heads * 32);
    auto step = step_on_device({0, len - 1, len});
    KVWELD_CUDA_CHECK(launch_attention({d_q.get(), d_k.get(), d_v.get(), out.get(), d_scores.get(), step.get(),
                                        d_table.get(), block, n_blocks, heads, heads / kv_heads, hd, kv_dim, 32, 0, 0},
                                       nullptr));
    sync();
    expect_close(to_host(out), want, 1e-5);
    // Position 29 is row 1 of table[7] = block 3.
    const auto k = random_vec(kv_dim, 23), v = random_vec(kv_dim, 24);
    auto d_ks = to_device(k), d_vs = to_device(v);
    KVWELD_CUDA_CHECK(launch_kv_write({d_ks.get(), d_vs.get(), d_k.get(), d_v.get(), step.get(), d_table.get(), block,
                                       n_blocks, kv_dim, -1, 0}, nullptr));
    sync();
    const auto kh = to_host(d_k);
    for (int i = 0; i < kv_dim; ++i) EXPECT_EQ(kh[std::size_t((3 * block + 1) * kv_dim + i)], k[std::size_t(i)]);
    // A storage of 3 blocks does not hold block 3: the write goes nowhere.
    const auto before = to_host(d_k);
    KVWELD_CUDA_CHECK(launch_kv_write({d_vs.get(), d_vs.get(), d_k.get(), d_v.get(), step.get(), d_table.get(), block, 3,
                                       kv_dim, -1, 0}, nullptr));
    sync();
    EXPECT_EQ(to_host(d_k), before);
}

TEST(CudaKernels, SwigluAndAdd) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const int n = 300;
    const auto g = random_vec(n, 13, 3.0f), u = random_vec(n, 14);
    std::vector<float> want = g;
    cpu::swiglu(want.data(), u.data(), n);
    auto d_g = to_device(g), d_u = to_device(u);
    KVWELD_CUDA_CHECK(launch_swiglu({d_g.get(), d_u.get(), n}, nullptr));
    std::vector<float> sum = want;
    cpu::add(sum.data(), u.data(), n);
    KVWELD_CUDA_CHECK(launch_add({d_g.get(), d_u.get(), n}, nullptr));
    sync();
    expect_close(to_host(d_g), sum, 1e-5);
}

// The LoRA delta against engine/adapters' reference (A then B, in double),
// with the factor read from the step data's slot.
TEST(CudaKernels, LoraAddReadsItsFactorFromTheStep) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const int rank = 4, n_in = 48, n_out = 40;
    LoraMatrix m;
    m.rank = rank;
    m.a = random_vec(std::size_t(rank * n_in), 15);
    m.b = random_vec(std::size_t(n_out * rank), 16);
    const auto x = random_vec(n_in, 17), base = random_vec(n_out, 18);
    StepData step{0, 0, 1, 1};
    step.lora_factor[3] = 0.75f;
    std::vector<float> want = base;
    lora_reference_add(want.data(), x.data(), m, n_in, n_out, 0.75f);
    auto d_a = to_device(m.a), d_b = to_device(m.b), d_x = to_device(x), d_out = to_device(base);
    DeviceBuffer<float> d_t(rank);
    const DeviceBuffer<StepData> d_step = step_on_device(step);
    KVWELD_CUDA_CHECK(launch_matvec({d_a.get(), d_x.get(), d_t.get(), rank, n_in}, nullptr));
    KVWELD_CUDA_CHECK(launch_lora_add({d_b.get(), d_t.get(), d_out.get(), d_step.get(), 3, n_out, rank}, nullptr));
    sync();
    expect_close(to_host(d_out), want, 1e-5);
}

TEST(CudaKernels, CvecAddsOnlyWhereItsLayerIsOn) {
    KVWELD_REQUIRE_CUDA_DEVICE();
    const int dim = 70;
    const auto x = random_vec(dim, 19), vec = random_vec(dim, 20);
    const std::vector<int> on = {0, 1, 0};
    auto d_x = to_device(x), d_vec = to_device(vec);
    DeviceBuffer<int> d_on(on.size());
    d_on.upload(on.data(), on.size());
    KVWELD_CUDA_CHECK(launch_cvec({d_x.get(), d_vec.get(), d_on.get(), 2, dim}, nullptr));  // off: unchanged
    sync();
    expect_close(to_host(d_x), x, 0.0);
    KVWELD_CUDA_CHECK(launch_cvec({d_x.get(), d_vec.get(), d_on.get(), 1, dim}, nullptr));
    sync();
    std::vector<float> want = x;
    cpu::add(want.data(), vec.data(), dim);
    expect_close(to_host(d_x), want, 1e-6);
}

}  // namespace
}  // namespace kvweld::cuda
