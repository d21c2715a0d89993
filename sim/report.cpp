#include "sim/report.hpp"

#include "sim/json_field.hpp"

#include "util/cat.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace kvweld::sim {

std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

std::string sci(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2e", v);
    return buf;
}

std::string table_row(const char* label, const std::string& value) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "  %-36s %s\n", label, value.c_str());
    return buf;
}

nlohmann::json failure_json(const Failure& f) {
    nlohmann::json j = {{"op_index", f.op_index}, {"op", f.op}, {"oracle", to_string(f.oracle)}, {"detail", f.detail}};
    if (!f.clause.empty()) j["clause"] = f.clause;
    return j;
}

Failure failure_from_json(const nlohmann::json& j) {
    return Failure{json_field<std::size_t>(j, "op_index"), json_field<std::string>(j, "op"),
                   oracle_from_string(json_field<std::string>(j, "oracle")), json_field<std::string>(j, "detail"),
                   j.contains("clause") ? json_field<std::string>(j, "clause") : std::string()};
}

nlohmann::json outcomes_json(const std::array<std::uint64_t, kVerdicts>& by_verdict) {
    nlohmann::json out = nlohmann::json::object();
    for (int v = 0; v < kVerdicts; ++v)
        if (by_verdict[std::size_t(v)]) out[std::string(to_string(Verdict(v)))] = by_verdict[std::size_t(v)];
    return out;
}

}  // namespace kvweld::sim
