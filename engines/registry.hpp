// The engines kvweld knows by name, one table: where each one's plugin is
// in this build, its reuse rule, its block model and the settings a seed
// may draw for it. Everything engine-specific the simulator needs comes
// from here; a plugin of the user's own (a path to a .so) has no entry and
// runs with what its capabilities allow. Opening an engine writes the
// model in the format the plugin asks for; the harness keeps the same
// weights for its reference.
#pragma once

#include "engine/model.hpp"
#include "engine/rng.hpp"
#include "engines/kvweld/block_model.hpp"
#include "engines/plugin_host.hpp"
#include "engines/llamacpp/llamacpp_params.hpp"
#include "engines/reuse_rule.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kvweld::engines {

struct EngineEntry {
    std::string_view name;
    const char* plugin;   // its path in this build, "" when not built (or in process)
    const char* missing;  // why not, when not built
    // In process: creates the engine (nullptr: a plugin, opened through the ABI).
    std::unique_ptr<Engine> (*in_process)(const std::string& faults, const EngineSetup& setup, const Model& model);
    std::uint32_t in_process_capabilities;  // what one in process declares
    const std::string& (*in_process_faults)();  // its fault switches, as the ABI lists them ("name:a|b,...")
    std::unique_ptr<ReuseRule> (*rule)(const EngineSetup&);  // nullptr: no rule (accounting off)
    BlockModel (*block_model)(const EngineSetup&);  // the block model that follows its pool (nullptr: none)
    // The settings setup.params leaves open, drawn and appended (nullptr: none).
    std::string (*draw_settings)(const EngineSetup& setup, Rng& rng);
    // In process: the setting that turns its plan reuse off ("key=value";
    // nullptr: none), for the differential twin (a plugin declares its own:
    // ABI 6 no_reuse_param).
    const char* in_process_no_reuse;
    // Its known findings file for the release this build makes (nullptr:
    // none; sim/known_findings.hpp).
    const char* known_findings;
    // Why the reference cannot follow the engine under these settings
    // (nullptr: it can, or no function): then the twin is the data oracle.
    const char* (*reference_blind)(const std::string& params);
    // Why its reuse rule does not apply to the build a plugin reports
    // (ABI 8 `build`; nullptr: it applies, or no function): the rule states
    // one release's facts, and another release runs without it, the twin on.
    const char* (*rule_gap)(const std::string& build);
};


const char* llamacpp_reference_blind(const std::string& params);
// Why kvweld's reference cannot follow `engine` under `params` ("": it can).
std::string reference_blind(std::string_view engine, const std::string& params);

// The entry of a built-in engine (nullptr for a plugin of the user's own).
// "llamacpp@0.3.20" is the built-in llamacpp, its plugin built against
// another release in the cache (scripts/setup-llama --version).
const EngineEntry* engine_entry(std::string_view name);
// Which build of the engine runs: a plugin's ABI 8 `build` ("" when it
// names none), kvweld in process its commit.
std::string engine_build(const std::string& engine);
// The release a build string names ("llama-cpp-python 0.3.20, llama.cpp
// f49e91787..." -> "0.3.20"; "" when it names none).
std::string build_release(const std::string& build);
// The release named after '@' in an engine's name ("llamacpp@0.3.20" ->
// "0.3.20"; "" for a plain name or a path).
std::string named_release(std::string_view engine);
// Why the reuse rule of the engine named `engine_name` does not apply to
// `build` ("": it does).
std::string rule_gap(std::string_view engine_name, const std::string& build);
// Whether `engine` runs in this process (and has the white-box capabilities).
bool engine_in_process(std::string_view engine);
// The ABI capabilities `engine` declares (KVWELD_CAP_*), without opening it.
std::uint32_t engine_capabilities(const std::string& engine);
// Its fault switches as the ABI lists them: "name:class|class,...".
std::string engine_fault_list(const std::string& engine);
// Its name in reports ("kvweld (in process)", or the plugin's own name).
std::string engine_display_name(const std::string& engine);
// Throws Error naming a bad engine name or path (before anything runs).
void require_engine(const std::string& engine);

// The engine a run gets when it names none: kvweld's dense engine in this process.
inline constexpr std::string_view kDefaultEngine = "inproc";

// "inproc, kvweld, kvweld-paged, llamacpp (not built here: ...)" for help texts and errors.
std::string builtin_engine_names();
// A built-in name's plugin path, or `engine` itself when it names a file;
// throws Error naming the engine and the built-in names otherwise.
std::string engine_plugin_path(const std::string& engine);
// Loaded once per process and path; later calls share it.
std::shared_ptr<const PluginLibrary> engine_library(const std::string& engine);

// The rule for the engine its plugin names (nullptr, and `why_not` says
// so, for one without); its block model (nullopt without); `setup.params`
// with the settings it leaves open drawn.
// `build` is the running engine's (engine_build): a rule that states one
// release's facts is not applied to another's.
std::unique_ptr<ReuseRule> reuse_rule_for(std::string_view engine_name, const std::string& build, const EngineSetup& setup,
                                          std::string& why_not);
std::optional<BlockModel> block_model_for(std::string_view engine_name, const EngineSetup& setup);
std::string draw_engine_settings(std::string_view engine_name, const EngineSetup& setup, Rng& rng);
// `params` with the engine's no-reuse setting in place of any value of its
// key (nullopt, and `why_not` says so, for an engine without one).
std::optional<std::string> twin_params(std::string_view engine, const std::string& params, std::string& why_not);

// The engine `engine` (a built-in name, in process or a plugin, or a plugin's path), created over
// `model` with the setup's sequences, positions and settings and the
// fault switches `faults` ("a,b").
std::unique_ptr<Engine> open_engine(const std::string& engine, const std::string& faults, const EngineSetup& setup,
                                    const Model& model);

// kvweld's dense engine in this process (engines/kvweld/dense_engine.hpp);
// `faults` are the dense design's.
std::unique_ptr<Engine> open_dense_engine(const std::string& faults, const EngineSetup& setup, const Model& model);
const std::string& dense_fault_list();  // every dense-design fault, the scheduler's included

// Each engine's drawn settings, in its own folder.
std::string kvweld_dense_settings(const EngineSetup& setup, Rng& rng);
std::string kvweld_paged_settings(const EngineSetup& setup, Rng& rng);
std::string llamacpp_settings(const EngineSetup& setup, Rng& rng);

}  // namespace kvweld::engines
