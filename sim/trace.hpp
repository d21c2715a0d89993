// Traces: JSON Lines. The first line is the header (format, version, seed,
// steps, the full configuration with its model spec); then one op per line
// with its drawn arguments.
#pragma once

#include "sim/run.hpp"

#include <iosfwd>
#include <string>
#include <vector>

namespace kvweld::sim {

inline constexpr int kTraceVersion = 2;  // 2: cache capacities (config) and the admit op's capacity pick

struct Trace {
    SimConfig config;
    int steps = 0;
    std::vector<Op> ops;
};

std::string trace_text(const SimConfig& config, int steps, const std::vector<Op>& ops);
void write_trace(const std::string& path, const SimConfig& config, int steps, const std::vector<Op>& ops);

// A truncated, corrupt or wrong-version trace throws Error naming the line
// and what is wrong.
Trace parse_trace(const std::string& text, const std::string& origin = "<trace>");
Trace read_trace(const std::string& path);

}  // namespace kvweld::sim
