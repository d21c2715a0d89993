#include "engine/file_bytes.hpp"

#include "engine/error.hpp"

#include <fstream>

namespace kvweld {

void write_file(const std::string& path, std::span<const std::byte> bytes, std::string_view what) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    require(out.good(), what, " ", path, ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    require(out.good(), what, " ", path, ": write failed");
}

}  // namespace kvweld
