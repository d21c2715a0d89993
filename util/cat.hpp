// cat(a, b, ...): concatenate anything streamable into a string. GCC 12 has
// no <format>; messages are built with this instead.
#pragma once

#include <sstream>
#include <string>

namespace kvweld {

template <class... Args>
std::string cat(const Args&... args) {
    std::ostringstream out;
    (out << ... << args);
    return out.str();
}

}  // namespace kvweld
