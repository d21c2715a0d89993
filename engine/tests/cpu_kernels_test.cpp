// The CPU kernels against the plainest loops, over odd sizes: rows that are
// not a multiple of the four-row block, columns that are not a multiple of
// the vector width (the AVX-512 path's masked tail included), attention
// over blocks that do not divide the length.
#include "engine/cpu_kernels.hpp"
#include "engine/reference.hpp"
#include "util/rng.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvweld {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (float& f : v) f = static_cast<float>(rng.unit() * 2.0 - 1.0);
    return v;
}

TEST(CpuKernels, MatvecMatchesPlainLoopsOnOddSizes) {
    for (int rows : {1, 3, 4, 5, 8, 13, 33}) {
        for (int cols : {1, 7, 15, 16, 17, 31, 32, 33, 48, 70, 288}) {
            const std::vector<float> w = random_floats(std::size_t(rows) * cols, rows * 100 + cols);
            const std::vector<float> x = random_floats(std::size_t(cols), cols);
            std::vector<float> got(static_cast<std::size_t>(rows)), want(static_cast<std::size_t>(rows));
            cpu::matvec(got.data(), w.data(), x.data(), rows, cols);
            for (int r = 0; r < rows; ++r) {
                double sum = 0.0;
                for (int c = 0; c < cols; ++c) sum += double(w[std::size_t(r) * cols + c]) * x[std::size_t(c)];
                want[std::size_t(r)] = static_cast<float>(sum);
            }
            EXPECT_LE(logit_error(got, want), 1e-5) << rows << " x " << cols;
        }
    }
}

// Single-query attention in doubles, position by position: what attend_blocks
// computes for one head whose lanes start `offset` floats into rows `stride`
// apart, position t at row t % block of block t / block (the table is the
// identity here: blocks are consecutive slices of one buffer, and a block's
// rows are walked in order, then the next block's).
std::vector<float> plain_attention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int offset, int len, int hd, int stride) {
    std::vector<double> p(static_cast<std::size_t>(len));
    double max = -INFINITY, sum = 0.0;
    for (int t = 0; t < len; ++t) {
        double dot = 0.0;
        for (int i = 0; i < hd; ++i) dot += double(q[std::size_t(i)]) * k[std::size_t(t * stride + offset + i)];
        p[std::size_t(t)] = dot / std::sqrt(double(hd));
        max = std::max(max, p[std::size_t(t)]);
    }
    for (double& x : p) sum += (x = std::exp(x - max));
    std::vector<float> out(static_cast<std::size_t>(hd));
    for (int i = 0; i < hd; ++i) {
        double acc = 0.0;
        for (int t = 0; t < len; ++t) acc += p[std::size_t(t)] / sum * v[std::size_t(t * stride + offset + i)];
        out[std::size_t(i)] = static_cast<float>(acc);
    }
    return out;
}

TEST(CpuKernels, AttentionOverBlocksMatchesPlainLoops) {
    const int stride = 37, offset = 5;  // a head's lanes inside a wider row
    for (int hd : {1, 7, 16, 24})
        for (int block : {1, 3, 5, 16})
            for (int len : {1, 2, 7, 16, 17, 33}) {
                const int n_blocks = (len + block - 1) / block;
                const std::size_t floats = std::size_t(n_blocks) * block * stride;
                const std::vector<float> q = random_floats(std::size_t(hd), hd * 7 + len);
                const std::vector<float> k = random_floats(floats, len * 31 + block);
                const std::vector<float> v = random_floats(floats, len * 37 + block);
                std::vector<const float*> kb, vb;
                for (int b = 0; b < n_blocks; ++b) {
                    kb.push_back(k.data() + std::size_t(b) * block * stride);
                    vb.push_back(v.data() + std::size_t(b) * block * stride);
                }
                std::vector<float> got(static_cast<std::size_t>(hd)), scores(static_cast<std::size_t>(len));
                cpu::attend_blocks(got.data(), scores.data(), q.data(), kb.data(), vb.data(), block, offset, len, hd,
                                   stride);
                EXPECT_LE(logit_error(got, plain_attention(q, k, v, offset, len, hd, stride)), 1e-5)
                    << "head_dim " << hd << ", block " << block << ", len " << len;
            }
}

}  // namespace
}  // namespace kvweld
