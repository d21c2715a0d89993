// A run's report, as text (seed and configuration first, verdict last) and
// as JSON. Built from the config, ops and stats alone: no ids, pointers or
// times, so a replay reproduces it byte for byte.
#pragma once

#include "sim/run.hpp"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <string>

namespace kvweld::sim {

std::string report_header(const RunResult& r);  // seed and configuration
std::string report_body(const RunResult& r);    // counts, ratios and the verdict
inline std::string text_report(const RunResult& r) { return report_header(r) + report_body(r); }
nlohmann::json json_report(const RunResult& r);

// Pieces every JSON report shares, whichever simulator wrote it: a
// failure, and a tally of seeds per verdict (only the verdicts seen).
nlohmann::json failure_json(const Failure& f);
Failure failure_from_json(const nlohmann::json& j);  // throws Error naming the field
nlohmann::json outcomes_json(const std::array<std::uint64_t, kVerdicts>& by_verdict);

// Fixed-point and scientific numbers, formatted the same on every run.
std::string fixed(double v, int digits);
std::string sci(double v);

// One "label   value" line of a closing table, labels in a column.
std::string table_row(const char* label, const std::string& value);

// The one command that reproduces a seed's run.
std::string reproduce_command(const SimConfig& c, int steps, const std::string& model_option);

}  // namespace kvweld::sim
