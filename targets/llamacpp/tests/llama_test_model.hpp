// kvweld's model as llama.cpp loads it, for the tests that drive llama.h
// directly: written to a GGUF file named for the test and this process,
// loaded on the CPU, the file removed. nullptr where llama.cpp refuses it.
#pragma once

#include "engine/gguf.hpp"
#include "engine/model.hpp"

#include <llama.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace kvweld {

inline llama_model* load_in_llama(const Model& model, const std::string& tag) {
    const std::string path =
        (std::filesystem::temp_directory_path() / ("kvweld-" + tag + "-" + std::to_string(::getpid()) + ".gguf")).string();
    save_gguf(model, path);
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* out = llama_model_load_from_file(path.c_str(), mp);
    std::filesystem::remove(path);
    return out;
}

}  // namespace kvweld
