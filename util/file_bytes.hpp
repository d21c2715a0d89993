// Writing a whole file at once, with errors that name the file and what it is.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvweld {

// Throws Error("<what> <path>: ...") when the file cannot be written.
void write_file(const std::string& path, std::span<const std::byte> bytes, std::string_view what);
// The whole file; an Error naming it when it cannot be read or is larger
// than `limit` bytes (checked before anything is allocated).
std::vector<std::byte> read_file(const std::string& path, std::size_t limit, std::string_view what);

}  // namespace kvweld
