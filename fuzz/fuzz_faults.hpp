// Fuzz targets read their fault switches from KVWELD_FUZZ_FAULTS (names,
// comma-separated), so a campaign can hunt for a planted bug.
#pragma once

#include "engine/error.hpp"
#include "engine/faults.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvweld::fuzz {

inline FaultSet faults_from_env() {
    FaultSet set;
    const char* env = std::getenv("KVWELD_FUZZ_FAULTS");
    if (!env) return set;
    std::string names = env;
    for (std::size_t start = 0; start <= names.size();) {
        const std::size_t comma = std::min(names.find(',', start), names.size());
        const std::string name = names.substr(start, comma - start);
        if (!name.empty()) {
            const auto f = fault_from_name(name);
            if (!f) {
                std::fprintf(stderr, "KVWELD_FUZZ_FAULTS: unknown fault '%s' (known: %s)\n", name.c_str(),
                             fault_names().c_str());
                std::abort();
            }
            set.add(*f);
        }
        start = comma + 1;
    }
    return set;
}

}  // namespace kvweld::fuzz
