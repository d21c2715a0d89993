#include "util/assert.hpp"

#include <cstdio>
#include <cstdlib>

namespace kvweld {

void assert_failed(const char* condition, const char* file, int line) {
    std::fprintf(stderr, "kvweld: internal invariant broken: %s (%s:%d)\n", condition, file, line);
    std::abort();
}

}  // namespace kvweld
