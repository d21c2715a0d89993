// Reading JSON Lines traces: each line parsed in order, the first as the
// header; a truncated last line, invalid JSON or an Error from `on_line`
// becomes an Error naming the origin and the line number.
#pragma once

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kvweld::sim {

// on_line(number, json); returns the number of lines read.
template <class OnLine>
int read_jsonl(const std::string& text, const std::string& origin, OnLine&& on_line) {
    std::istringstream in(text);
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
        ++number;
        const bool last = in.eof();
        try {
            require(!(last && !text.empty() && text.back() != '\n'),
                    "line is not terminated: the trace is truncated");
            on_line(number, nlohmann::json::parse(line));
        } catch (const nlohmann::json::exception& e) {
            throw Error(cat("trace ", origin, " line ", number, ": invalid JSON (", e.what(), ")"));
        } catch (const Error& e) {
            throw Error(cat("trace ", origin, " line ", number, ": ", e.what()));
        }
    }
    require(number >= 1, "trace ", origin, " line 1: the trace is empty (no header)");
    return number;
}

// The whole file as text; throws Error naming the path when it cannot be
// read or is larger than any trace kvweld writes (256 MiB).
inline std::string read_text_file(const std::string& path, const char* what = "trace") {
    constexpr std::uintmax_t kMaxBytes = std::uintmax_t{256} << 20;
    std::error_code ec;
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    require(!ec || !std::filesystem::exists(path), what, " ", path, ": cannot read its size (", ec.message(), ")");
    require(ec || size <= kMaxBytes, what, " ", path, " is ", size, " bytes: the limit is ", kMaxBytes);
    std::ifstream in(path, std::ios::binary);
    require(in.good(), what, " ", path, ": cannot open the file");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace kvweld::sim
