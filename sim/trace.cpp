#include "sim/trace.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "sim/jsonl.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace kvweld::sim {

std::string trace_text(const SimConfig& config, int steps, const std::vector<Op>& ops) {
    const nlohmann::json header = {{"format", "kvweld-trace"},
                                   {"version", kTraceVersion},
                                   {"seed", config.seed},
                                   {"steps", steps},
                                   {"config", config}};
    std::string out = header.dump() + "\n";
    for (const Op& op : ops) out += nlohmann::json(op).dump() + "\n";
    return out;
}

void write_trace(const std::string& path, const SimConfig& config, int steps, const std::vector<Op>& ops) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    require(out.good(), "trace ", path, ": cannot open for writing");
    out << trace_text(config, steps, ops);
    require(out.good(), "trace ", path, ": write failed");
}

namespace {

Trace parse_header(const nlohmann::json& h) {
    require(h.is_object() && h.value("format", "") == "kvweld-trace",
            "not a kvweld trace header (expected \"format\": \"kvweld-trace\")");
    require(h.contains("version") && h.at("version").is_number_integer(), "header has no integer 'version'");
    const int version = h.at("version").get<int>();
    require(version == kTraceVersion,
            "trace version ", version, " is not supported (this build reads version ", kTraceVersion, ")");
    require(h.contains("steps") && h.at("steps").is_number_integer(), "header has no integer 'steps'");
    require(h.contains("config"), "header has no 'config'");
    Trace t;
    t.steps = h.at("steps").get<int>();
    require(t.steps >= 0, "header 'steps' = ", t.steps, ": must be >= 0");
    t.config = config_from_json(h.at("config"));
    return t;
}

}  // namespace

Trace parse_trace(const std::string& text, const std::string& origin) {
    Trace trace;
    read_jsonl(text, origin, [&](int number, const nlohmann::json& j) {
        if (number == 1)
            trace = parse_header(j);
        else
            trace.ops.push_back(op_from_json(j));
    });
    require(trace.ops.size() <= static_cast<std::size_t>(trace.steps),
            "trace ", origin, ": ", trace.ops.size(), " ops but the header says ", trace.steps,
                " steps");
    return trace;
}

Trace read_trace(const std::string& path) { return parse_trace(read_text_file(path), path); }

std::string read_text_file(const std::string& path, const char* what) {
    std::ifstream in(path, std::ios::binary);
    require(in.good(), what, " ", path, ": cannot open the file");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace kvweld::sim
