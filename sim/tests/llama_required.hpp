// A test that needs llama.cpp: skipped where this build has none, failed
// where the build requires it (KVWELD_REQUIRE_LLAMA, which scripts/test
// sets), so CI can never pass with zero llama.cpp coverage.
#pragma once

#include <gtest/gtest.h>

#ifdef KVWELD_LLAMA_REQUIRED
#define KVWELD_WITHOUT_LLAMA(why) GTEST_FAIL() << "llama.cpp is required in this build (KVWELD_REQUIRE_LLAMA): " << why
#else
#define KVWELD_WITHOUT_LLAMA(why) GTEST_SKIP() << why
#endif
