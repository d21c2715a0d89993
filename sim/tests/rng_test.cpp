#include "util/rng.hpp"

#include <gtest/gtest.h>

#include <array>

namespace kvweld {
namespace {

// The PRNG is part of the trace format: its stream must never change.
TEST(Rng, StreamIsPinned) {
    Rng rng(42);
    const std::array<std::uint64_t, 3> first = {rng.next(), rng.next(), rng.next()};
    Rng again(42);
    for (std::uint64_t v : first) EXPECT_EQ(again.next(), v);
    Rng other(43);
    EXPECT_NE(other.next(), first[0]);
}

TEST(Rng, BelowAndRangeStayInBounds) {
    Rng rng(1);
    std::array<int, 5> hits{};
    for (int i = 0; i < 5000; ++i) {
        const auto v = rng.below(5);
        ASSERT_LT(v, 5u);
        ++hits[v];
        const auto r = rng.range(-3, 3);
        ASSERT_GE(r, -3);
        ASSERT_LE(r, 3);
        const double u = rng.unit();
        ASSERT_GE(u, 0.0);
        ASSERT_LT(u, 1.0);
    }
    for (int h : hits) EXPECT_GT(h, 800);  // roughly uniform: 1000 expected each
}

}  // namespace
}  // namespace kvweld
