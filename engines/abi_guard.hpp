// For plugins written in C++: runs a call's body and turns any exception
// into the ABI's failure (a non-zero return and the message in err), so
// nothing is thrown across the C boundary (include/kvweld/engine_abi.h).
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>

namespace kvweld::abi {

template <class Fn>
int guarded(char* err, std::size_t err_len, Fn&& fn) {
    try {
        fn();
        return 0;
    } catch (const std::exception& e) {
        if (err && err_len) {
            std::strncpy(err, e.what(), err_len - 1);
            err[err_len - 1] = '\0';
        }
        return 1;
    }
}

}  // namespace kvweld::abi
