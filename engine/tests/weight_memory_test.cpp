// Weight memory: aligned as the kernels assume (64 bytes; 2 MiB from 2 MiB
// up, so the huge-page hint covers whole pages), writable end to end, and
// returned with the size it was taken with. Whether the kernel grants huge
// pages is its choice, so no test asserts it.
#include "engine/weight_memory.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kvweld {
namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(WeightMemory, SmallBlocksAreCacheLineAlignedAndLargeOnesHugePageAligned) {
    constexpr std::size_t kHuge = std::size_t(2) << 20;
    for (const std::size_t bytes : {std::size_t(4), std::size_t(64), std::size_t(1000), kHuge - 4, kHuge, kHuge + 4,
                                    3 * kHuge + 100}) {
        SCOPED_TRACE(bytes);
        auto* p = static_cast<unsigned char*>(allocate_weight_memory(bytes));
        EXPECT_EQ(address(p) % 64, 0u);
        if (bytes >= kHuge) {
            EXPECT_EQ(address(p) % kHuge, 0u);
        }
        // Every byte is ours: the sanitizer build checks the first and last.
        p[0] = 1;
        p[bytes - 1] = 2;
        EXPECT_EQ(p[0] + p[bytes - 1], 3);
        free_weight_memory(p, bytes);
    }
}

TEST(WeightMemory, AVectorInItHoldsWhatWasPutThere) {
    std::vector<float, WeightAllocator<float>> v(std::size_t(1) << 20);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i % 977);
    EXPECT_EQ(address(v.data()) % 64, 0u);
    v.resize(v.size() + 17, 5.0f);  // reallocates: a copy into fresh weight memory
    EXPECT_EQ(v[976], 976.0f);
    EXPECT_EQ(v[977], 0.0f);
    EXPECT_EQ(v.back(), 5.0f);
}

}  // namespace
}  // namespace kvweld
