// The CPU kernels against the plainest loops, over odd sizes: rows that are
// not a multiple of the four-row block, columns that are not a multiple of
// the vector width (the AVX-512 path's masked tail included).
#include "engine/cpu_kernels.hpp"
#include "engine/reference.hpp"
#include "engine/rng.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kvweld
