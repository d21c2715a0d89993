// The pieces of a run's report (sim/run.hpp prints it, seed and
// configuration first, verdict last; sim/json_report.hpp writes it):
// built from the config, ops and stats alone, no ids, pointers or times, so
// a replay reproduces it byte for byte.
#pragma once

#include "sim/verdict.hpp"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <string>

namespace kvweld::sim {

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

}  // namespace kvweld::sim
