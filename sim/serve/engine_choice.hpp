// Which engine a serving run drives: a built-in name (kvweld, llamacpp),
// resolved to the plugin this build made, or the path of a plugin of the
// user's own. Opening one writes the model in the format the plugin asks
// for; the harness keeps the same weights for its reference.
#pragma once

#include "engine/model.hpp"
#include "sim/engine_plugin.hpp"
#include "sim/serve/serve_config.hpp"

#include <memory>
#include <string>

namespace kvweld::sim {

// "kvweld, llamacpp (not built here: ...)" for help texts and errors.
std::string builtin_engine_names();
// A built-in name's plugin path, or `engine` itself when it names a file;
// throws Error naming the engine and the built-in names otherwise.
std::string engine_plugin_path(const std::string& engine);
// Loaded once per process and path; later calls share it.
std::shared_ptr<const PluginLibrary> engine_library(const std::string& engine);

// `model` written to a temporary file in `format` ("gguf" or "llama2c"),
// removed again when this goes.
class ModelFile {
public:
    ModelFile(const Model& model, const std::string& format);
    ~ModelFile();
    ModelFile(const ModelFile&) = delete;
    ModelFile& operator=(const ModelFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// The engine, created with the config's sequences, positions, settings and
// faults over `model`.
std::unique_ptr<PluginEngine> open_engine(const ServeConfig& config, const Model& model);

}  // namespace kvweld::sim
