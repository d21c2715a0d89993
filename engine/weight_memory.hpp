// Memory for the weights a plan streams through every token: 64-byte
// aligned, and, where the block is big enough, in transparent huge pages.
//
// Why huge pages: a decode step reads every weight once, tens or hundreds
// of megabytes, and in 4 KiB pages a one-core stream over them is held back
// by address translation (a TLB miss every 4 KiB). Measured on this
// project's 2-core Xeon: a one-thread sum over 61 MB ran at 17-19 GB/s in
// 4 KiB pages and 26-27 GB/s in 2 MiB pages; decode_bench's weights_stream
// and weights_stream_4k_pages peers measure it at both model sizes.
// The kernel decides: with THP off, or outside Linux, the hint is a no-op
// and the memory is ordinary; nothing here depends on getting huge pages.
#pragma once

#include <cstddef>

namespace kvweld {

// At least 64-byte aligned; a block of 2 MiB or more starts on a 2 MiB
// boundary and its whole 2 MiB pages are marked for huge pages (madvise)
// before anything touches them. Throws std::bad_alloc like operator new.
void* allocate_weight_memory(std::size_t bytes);
// `bytes` as passed to allocate_weight_memory.
void free_weight_memory(void* p, std::size_t bytes) noexcept;

// The process's anonymous memory in huge pages, in bytes (Linux:
// AnonHugePages of /proc/self/smaps_rollup); 0 where it cannot be read.
// With THP in "madvise" mode only memory that asked for huge pages gets
// them, so after a plan build this tells whether its weights did.
std::size_t anon_huge_page_bytes();

// The allocator for containers of such memory.
template <class T>
struct WeightAllocator {
    using value_type = T;
    WeightAllocator() = default;
    template <class U>
    WeightAllocator(const WeightAllocator<U>&) {}
    T* allocate(std::size_t n) { return static_cast<T*>(allocate_weight_memory(n * sizeof(T))); }
    void deallocate(T* p, std::size_t n) noexcept { free_weight_memory(p, n * sizeof(T)); }
    friend bool operator==(const WeightAllocator&, const WeightAllocator&) { return true; }
};

}  // namespace kvweld
