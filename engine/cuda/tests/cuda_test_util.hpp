// Shared by the CUDA tests: skip visibly when no device is present, unless
// KVWELD_REQUIRE_CUDA=1 says one must be (scripts/gpu-check sets it): then
// a missing or unusable device, a driver mismatch included, is a failure.
#pragma once

#include "engine/decode_session.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <string_view>

namespace kvweld::testing {
inline bool cuda_required() {
    const char* v = std::getenv("KVWELD_REQUIRE_CUDA");
    return v != nullptr && std::string_view(v) == "1";
}
}  // namespace kvweld::testing

#define KVWELD_REQUIRE_CUDA_DEVICE()                                                                     \
    do {                                                                                                 \
        std::string kvweld_why;                                                                          \
        if (!::kvweld::cuda_backend_available(&kvweld_why)) {                                            \
            if (::kvweld::testing::cuda_required())                                                      \
                GTEST_FAIL() << "KVWELD_REQUIRE_CUDA=1 but the CUDA device is unusable: " << kvweld_why; \
            GTEST_SKIP() << "no CUDA device, test skipped: " << kvweld_why;                              \
        }                                                                                                \
    } while (0)
