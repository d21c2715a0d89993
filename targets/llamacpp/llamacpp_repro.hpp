// llama.cpp's reproducer writer (targets/repro.hpp): each call the plugin
// makes for an engine call (llamacpp_engine_plugin.cpp), written as the
// same llama.h calls on the engine's context and on its ground truth's.
#pragma once

#include "targets/repro.hpp"

namespace kvweld::targets {

std::unique_ptr<ReproWriter> llamacpp_repro(const ReproSetup& setup);

extern const char* const kLlamacppReproPrelude;  // llamacpp_repro_prelude.hpp's text (CMake writes it)
extern const char* const kLlamaCompatText;       // llama_compat.hpp's text (CMake writes it)
extern const char* const kLlamaNewestText;       // llama_newest.hpp's: an upstream-style test's, in compat's place

}  // namespace kvweld::targets
