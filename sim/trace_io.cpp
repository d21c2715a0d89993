// Trace I/O: a run as JSON Lines and back (sim/run.hpp).
#include "sim/run.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/ddmin.hpp"
#include "sim/op_table.hpp"
#include "sim/jsonl.hpp"
#include "sim/known_findings.hpp"
#include "sim/report.hpp"
#include "sim/seed_pool.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace kvweld::sim {

std::string trace_text(const RunResult& r) {
    const nlohmann::json header = {{"format", kTraceFormat},
                                   {"version", kTraceVersion},
                                   {"seed", r.config.seed},
                                   {"steps", r.steps},
                                   {"config", r.config}};
    std::string out = header.dump() + "\n";
    for (const Op& op : r.ops) out += nlohmann::json(op).dump() + "\n";
    return out;
}

Trace parse_trace(const std::string& text, const std::string& origin) {
    Trace t;
    read_jsonl(text, origin, [&](int number, const nlohmann::json& j) {
        if (number > 1) {
            t.ops.push_back(op_from_json(j));
            if (t.ops.back().kind() == OpKind::admit)
                for (int token : t.ops.back().as<ops::Admit>().prompt)
                    require(token < t.config.model.vocab, "prompt token ", token,
                            " out of range: the model's vocab is ", t.config.model.vocab);
            return;
        }
        const std::string format = j.is_object() ? j.value("format", "") : "";
        require(format == kTraceFormat || format == "kvweld-serve-trace",
                "not a kvweld trace header (expected \"format\": \"", kTraceFormat, "\")");
        const int version = j.contains("version") && j.at("version").is_number_integer() ? j.at("version").get<int>() : -1;
        // Before version 3 there were two simulators and two formats; their
        // seeds drew other ops, so an old trace is refused, not converted.
        require(format == kTraceFormat && version == kTraceVersion, "trace version ", version, " (format ",
                format, ") is not supported: this build reads ", kTraceFormat, " version ", kTraceVersion,
                " (one simulator for every engine); record it again with kvweld sim --trace");
        require(j.contains("steps") && j.at("steps").is_number_integer() && j.at("steps").get<int>() >= 0,
                "header has no 'steps' >= 0");
        require(j.contains("config"), "header has no 'config'");
        t.steps = j.at("steps").get<int>();
        t.config = config_from_json(j.at("config"));
    });
    require(t.ops.size() <= std::size_t(t.steps), "trace ", origin, ": ", t.ops.size(),
            " ops but the header says ", t.steps, " steps");
    return t;
}

}  // namespace kvweld::sim
