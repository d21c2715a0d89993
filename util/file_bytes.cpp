#include "util/file_bytes.hpp"

#include "util/error.hpp"

#include <fstream>

namespace kvweld {

void write_file(const std::string& path, std::span<const std::byte> bytes, std::string_view what) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    require(out.good(), what, " ", path, ": cannot open for writing");
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    require(out.good(), what, " ", path, ": write failed");
}

std::vector<std::byte> read_file(const std::string& path, std::size_t limit, std::string_view what) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    require(in.good(), what, " ", path, ": cannot open the file");
    const auto size = std::size_t(in.tellg());
    require(size <= limit, what, " ", path, ": file is ", size, " bytes, past the limit of ", limit);
    in.seekg(0);
    std::vector<std::byte> bytes(size);
    in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size));
    require(!in.bad() && std::size_t(in.gcount()) == size, what, " ", path, ": read error");
    return bytes;
}

}  // namespace kvweld
