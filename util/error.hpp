// The engine's one error type. Messages name the offending value and the
// limit it broke, e.g. "token 40000 out of range: vocab_size is 32000".
#pragma once

#include "util/cat.hpp"

#include <stdexcept>
#include <string>

namespace kvweld {

class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Throws Error(cat(message...)) unless cond holds. The message is only
// built on failure: checks sit on the decode path.
template <class... Parts>
void require(bool cond, const Parts&... message) {
    if (!cond) [[unlikely]]
        throw Error(cat(message...));
}

}  // namespace kvweld
