#include "engine/weight_memory.hpp"

#include <fstream>
#include <new>
#include <sstream>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kvweld {

namespace {

constexpr std::size_t kHugePage = std::size_t(2) << 20;
constexpr std::size_t kCacheLine = 64;

std::align_val_t alignment_for(std::size_t bytes) {
    return std::align_val_t{bytes >= kHugePage ? kHugePage : kCacheLine};
}

}  // namespace

void* allocate_weight_memory(std::size_t bytes) {
    void* p = ::operator new(bytes, alignment_for(bytes));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    // Only the whole huge pages inside the block: never advise a neighbour's
    // memory. A refusal (THP compiled out) leaves ordinary pages: ignored.
    if (const std::size_t whole = bytes / kHugePage * kHugePage; whole > 0) (void)::madvise(p, whole, MADV_HUGEPAGE);
#endif
    return p;
}

void free_weight_memory(void* p, std::size_t bytes) noexcept { ::operator delete(p, alignment_for(bytes)); }

std::size_t anon_huge_page_bytes() {
    std::ifstream in("/proc/self/smaps_rollup");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("AnonHugePages:", 0) == 0) {
            std::istringstream fields(line.substr(14));
            std::size_t kib = 0;
            fields >> kib;
            return kib * 1024;
        }
    return 0;
}

}  // namespace kvweld
