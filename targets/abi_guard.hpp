// For plugins written in C++: runs a call's body and turns any exception
// into the ABI's failure (a non-zero return and the message in err), so
// nothing is thrown across the C boundary (include/kvweld/engine_abi.h).
#pragma once

#include <cstddef>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

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

// The ABI's two-call buffer convention (state_save): *n gets the size;
// with out, the bytes too, if cap holds them.
template <class Bytes>
void write_sized(const Bytes& bytes, unsigned char* out, std::size_t cap, std::size_t* n) {
    if (!n) throw std::invalid_argument("no size pointer given");
    *n = bytes.size();
    if (!out) return;
    if (cap < bytes.size())
        throw std::length_error("a buffer of " + std::to_string(cap) + " bytes for a state of " +
                                std::to_string(bytes.size()));
    std::memcpy(out, bytes.data(), bytes.size());
}

}  // namespace kvweld::abi
