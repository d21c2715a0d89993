// kvweld's own engines in the registry: its dense engine in process
// ("inproc") and as a plugin ("kvweld"), and its paged plugin
// ("kvweld-paged"); the rules their rows name live beside them.
#pragma once

#include "targets/engine_entry.hpp"

namespace kvweld::targets {

extern const EngineEntry kInprocEntry, kKvweldEntry, kKvweldPagedEntry;

std::unique_ptr<ReuseRule> kvweld_reuse_rule(const EngineSetup& setup, const std::string& build = "");        // kvweld_rule.cpp
std::unique_ptr<ReuseRule> kvweld_paged_reuse_rule(const EngineSetup& setup, const std::string& build = "");  // kvweld_paged_rule.cpp

}  // namespace kvweld::targets
