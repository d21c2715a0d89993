// Shared by the CUDA tests: skip visibly when no device is present.
#pragma once

#include "engine/decode_session.hpp"

#include <gtest/gtest.h>

#include <string>

#define KVWELD_REQUIRE_CUDA_DEVICE()                                                \
    do {                                                                            \
        std::string kvweld_why;                                                     \
        if (!::kvweld::cuda_backend_available(&kvweld_why))                         \
            GTEST_SKIP() << "no CUDA device, test skipped: " << kvweld_why;         \
    } while (0)
