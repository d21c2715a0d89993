#include "engines/registry.hpp"

#include "engine/cat.hpp"
#include "engine/checkpoint.hpp"
#include "engine/error.hpp"
#include "engine/gguf.hpp"

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>

#include <unistd.h>

#ifndef KVWELD_PLUGIN_PATH
#define KVWELD_PLUGIN_PATH ""
#endif
#ifndef KVWELD_PAGED_PLUGIN_PATH
#define KVWELD_PAGED_PLUGIN_PATH ""
#endif
#ifndef LLAMACPP_PLUGIN_PATH
#define LLAMACPP_PLUGIN_PATH ""
#endif
#ifndef LLAMACPP_MISSING
#define LLAMACPP_MISSING "not built"
#endif

namespace kvweld::engines {

namespace {

const EngineEntry kEngines[] = {
    {"kvweld", KVWELD_PLUGIN_PATH, "not built", kvweld_reuse_rule, nullptr, nullptr},
    {"kvweld-paged", KVWELD_PAGED_PLUGIN_PATH, "not built", kvweld_paged_reuse_rule, BlockModel::for_kvweld_paged,
     kvweld_paged_settings},
    {"llamacpp", LLAMACPP_PLUGIN_PATH, LLAMACPP_MISSING, llamacpp_reuse_rule, nullptr, llamacpp_settings},
};

}  // namespace

const EngineEntry* engine_entry(std::string_view name) {
    for (const EngineEntry& e : kEngines)
        if (e.name == name) return &e;
    return nullptr;
}

std::string builtin_engine_names() {
    std::string out;
    for (const EngineEntry& e : kEngines)
        out += cat(out.empty() ? "" : ", ", e.name, *e.plugin ? "" : cat(" (", e.missing, ")"));
    return out;
}

std::unique_ptr<ReuseRule> reuse_rule_for(std::string_view engine_name, const EngineSetup& setup,
                                          std::string& why_not) {
    const EngineEntry* e = engine_entry(engine_name);
    if (e && e->rule) return e->rule(setup);
    why_not = cat("no reuse rule for engine '", engine_name, "' (engines/registry.cpp lists the rules)");
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
    try {
        return e->draw_settings(setup, rng);
    } catch (const std::runtime_error& error) {  // a bad --params, named
        throw Error(cat("engine ", engine_name, ": ", error.what()));
    }
}

std::string engine_plugin_path(const std::string& engine) {
    if (const EngineEntry* e = engine_entry(engine)) {
        require(*e->plugin, "engine '", engine, "' is not available in this build: ", e->missing);
        return e->plugin;
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

ModelFile::ModelFile(const Model& model, const std::string& format) {
    require(format == "gguf" || format == "llama2c", "model format '", format,
            "' asked for: this kvweld writes gguf or llama2c");
    static std::atomic<std::uint64_t> serial{0};
    path_ = (std::filesystem::temp_directory_path() / cat("kvweld-", ::getpid(), "-", serial++, ".", format)).string();
    if (format == "gguf")
        save_gguf(model, path_);
    else
        save_llama2c(model, path_);
}

ModelFile::~ModelFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
}

std::unique_ptr<Engine> open_engine(const std::string& engine, const std::string& faults, const EngineSetup& setup,
                                    const Model& model) {
    const auto library = engine_library(engine);
    const ModelFile file(model, library->api().model_format);
    const kvweld_engine_options options{file.path().c_str(), setup.n_ctx, setup.seqs, setup.threads, faults.c_str(),
                                        setup.params.c_str()};
    return std::make_unique<PluginEngine>(library, options);
}

}  // namespace kvweld::engines
