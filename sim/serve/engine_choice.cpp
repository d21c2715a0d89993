#include "sim/serve/engine_choice.hpp"

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

namespace kvweld::sim {

namespace {

struct Builtin {
    const char* name;
    const char* path;  // "" when this build has no such plugin
    const char* missing;
};
constexpr Builtin kBuiltins[] = {
    {"kvweld", KVWELD_PLUGIN_PATH, "not built"},
    {"kvweld-paged", KVWELD_PAGED_PLUGIN_PATH, "not built"},
    {"llamacpp", LLAMACPP_PLUGIN_PATH, LLAMACPP_MISSING},
};

}  // namespace

std::string builtin_engine_names() {
    std::string out;
    for (const Builtin& b : kBuiltins)
        out += cat(out.empty() ? "" : ", ", b.name, *b.path ? "" : cat(" (", b.missing, ")"));
    return out;
}

std::string engine_plugin_path(const std::string& engine) {
    for (const Builtin& b : kBuiltins) {
        if (engine != b.name) continue;
        require(*b.path, "engine '", engine, "' is not available in this build: ", b.missing);
        return b.path;
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

std::unique_ptr<PluginEngine> open_engine(const ServeConfig& config, const Model& model) {
    const auto library = engine_library(config.engine.engine);
    const ModelFile file(model, library->api().model_format);
    const kvweld_engine_options options{file.path().c_str(), config.n_ctx, config.seqs, 1,
                                        config.engine.faults.c_str(), config.engine.params.c_str()};
    return std::make_unique<PluginEngine>(library, options);
}

}  // namespace kvweld::sim
