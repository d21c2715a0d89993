// An engine in a process of its own, the way libFuzzer's fork mode and
// syzkaller's executor keep a target apart: kvweld starts kvweld-engine-host
// (targets/isolation/engine_host_main.cpp), which loads the plugin and
// creates the engine there, and every call of the ABI goes over the wire
// (targets/isolation/wire.hpp). The plugin host (targets/plugin_host.hpp)
// drives it through the same table as a plugin in this process: the
// remote table below has the plugin's names, capabilities and reuse rule,
// and in place of each engine function one that sends the call.
//
// An abort, a signal, an exit or a call not answered in time (the process
// is then killed by its PID) loses the engine: that call and every later
// one return kProcessLost with a message naming the call, how the process
// ended and the last lines it wrote; the plugin host throws Crashed. The
// process is killed and reaped when the engine is destroyed, and dies with
// the kvweld that started it.
#pragma once

#include "kvweld/engine_abi.h"
#include "targets/given_settings.hpp"

#include <climits>
#include <string>

namespace kvweld::targets::isolation {

// A result no ABI function returns: the engine's process is gone.
inline constexpr int kProcessLost = INT_MIN;

// `real`'s table with each engine function it has replaced by one that
// sends the call to the engine's process (the rest NULL, as in `real`).
kvweld_engine_api remote_table(const kvweld_engine_api& real);

// Starts the engine's process for the plugin at `plugin` and creates the
// engine there with `options`; `timeout_ms` bounds every later call.
// The handle is for remote_table's functions only; it is set even when
// create fails (its crash title readable), and destroy ends it either way.
int remote_create(const std::string& plugin, const kvweld_engine_options& options, const GivenSettings& settings,
                  int timeout_ms, kvweld_engine** out, char* err, size_t err_len);

// The crash's title once the process is gone ("" while it lives).
std::string remote_crash_title(const kvweld_engine* engine);

// The helper kvweld starts: $KVWELD_ENGINE_HOST, else the one this build made.
std::string engine_host_path();

}  // namespace kvweld::targets::isolation
