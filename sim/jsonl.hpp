// Reading JSON Lines traces: each line parsed in order, the first as the
// header; a truncated last line, invalid JSON or an Error from `on_line`
// becomes an Error naming the origin and the line number.
#pragma once

#include "engine/cat.hpp"
#include "engine/error.hpp"

#include <nlohmann/json.hpp>

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

// The whole file as text; throws Error naming the path when it cannot be read.
std::string read_text_file(const std::string& path, const char* what = "trace");

}  // namespace kvweld::sim
