// llama.cpp in the registry ("llamacpp", and "llamacpp@V" for another
// cached release); the rule its row names lives beside it.
#pragma once

#include "targets/engine_entry.hpp"

namespace kvweld::targets {

extern const EngineEntry kLlamacppEntry;

// llamacpp_rule.cpp; build: the plugin's (ABI 8), whose release facts it states ("": the pinned release's)
std::unique_ptr<ReuseRule> llamacpp_reuse_rule(const EngineSetup& setup, const std::string& build = "");
// Why that rule does not apply to a plugin's build (nullptr: the build is
// of a release the rule states the facts of) or to the memory `params`
// name (it models llama_kv_cache's graph-reuse key).
const char* llamacpp_rule_gap(const std::string& build, const std::string& params);

}  // namespace kvweld::targets
