// The engine's one error type. Messages name the offending value and the
// limit it broke, e.g. "token 40000 out of range: vocab_size is 32000".
#pragma once

#include <stdexcept>
#include <string>

namespace kvweld {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Throws Error(what) unless cond holds. For argument checks on public API.
inline void require(bool cond, const std::string& what) {
    if (!cond) throw Error(what);
}

}  // namespace kvweld
