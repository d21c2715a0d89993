// A reuse rule a plugin ships (ABI 14: rule_create and the rest in
// include/kvweld/engine_abi.h): the accounting oracle's rule for an engine
// built elsewhere, which kvweld's registry has no rule for. The host tells
// it each memory call as a kvweld_call and asks it each decode call's
// expectation, as it does a rule of its own.
#pragma once

#include "targets/engine.hpp"
#include "targets/reuse_rule.hpp"

#include <memory>
#include <string>

namespace kvweld::targets {

// The rule the plugin `engine` (a path or a built-in's name) ships, made
// for `setup`; nullptr where the engine runs in process or ships none.
std::unique_ptr<ReuseRule> shipped_rule(const std::string& engine, const EngineSetup& setup);

}  // namespace kvweld::targets
