// Strict reads of JSON fields for traces: a missing or mistyped field
// throws kvweld::Error naming it.
#pragma once

#include "util/error.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim {

template <class T>
T json_field(const nlohmann::json& j, const char* name) {
    if (!j.is_object() || !j.contains(name)) throw Error(cat("missing field '", name, "'"));
    try {
        return j.at(name).get<T>();
    } catch (const nlohmann::json::exception&) {
        throw Error(cat("field '", name, "' has the wrong type: ", j.at(name).dump()));
    }
}

// An int field that must lie in lo..hi.
inline int json_int_in(const nlohmann::json& j, const char* name, int lo, int hi) {
    const int v = json_field<int>(j, name);
    require(v >= lo && v <= hi, "field '", name, "' = ", v, ": must be in ", lo, "..", hi);
    return v;
}

}  // namespace kvweld::sim
