// KVWELD_ASSERT: invariants of kvweld's own code (never a check of input:
// bad input is an Error, see error.hpp). A failed assertion is a bug in
// kvweld; it prints the condition and where, then aborts, so a fuzzer or a
// debugger stops right there. Compiled in every preset but `release`
// (CMake option KVWELD_ASSERTS).
#pragma once

namespace kvweld {
[[noreturn]] void assert_failed(const char* condition, const char* file, int line);
}

#ifdef KVWELD_ASSERTS
#define KVWELD_ASSERT(cond) ((cond) ? void(0) : ::kvweld::assert_failed(#cond, __FILE__, __LINE__))
#else
#define KVWELD_ASSERT(cond) void(0)
#endif
