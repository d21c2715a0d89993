// Writing a whole file at once, with errors that name the file and what it is.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace kvweld {

// Throws Error("<what> <path>: ...") when the file cannot be written.
void write_file(const std::string& path, std::span<const std::byte> bytes, std::string_view what);

}  // namespace kvweld
