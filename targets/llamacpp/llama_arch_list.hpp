// The architectures kvweld makes for llama.cpp's memories (the plugin's
// arch= setting), as data: one row each, with the memory llama.cpp gives
// it (create_memory, src/llama-model.cpp). Apart from the models
// themselves (llama_arch_models.hpp), which need llama.h: the reuse rule
// and the registry read this where llama.cpp is not built.
#pragma once

#include <array>
#include <string>

namespace kvweld::llamacpp {

enum class MemoryKind { kv, sliding_window, recurrent, hybrid, hybrid_sliding_window };

struct ArchModel {
    const char* name;  // kvweld's (the plugin's arch=NAME)
    const char* arch;  // llama.cpp's general.architecture
    MemoryKind memory;
    bool window;       // with attention.sliding_window
};

// One architecture per memory kind, in MemoryKind's order.
inline constexpr std::array<ArchModel, 5> kArchModels{{
    {"llama", "llama", MemoryKind::kv, false},
    {"granite_swa", "granite_swa", MemoryKind::sliding_window, true},
    {"mamba", "mamba", MemoryKind::recurrent, false},
    {"lfm2", "lfm2", MemoryKind::hybrid, false},
    {"lfm2_swa", "lfm2", MemoryKind::hybrid_sliding_window, true},
}};

// The architecture kvweld names `name`, or nullptr.
inline const ArchModel* find_arch(const std::string& name) {
    for (const ArchModel& a : kArchModels)
        if (name == a.name) return &a;
    return nullptr;
}

// Whether the memory keeps a recurrent state (a sequence's cell holds one
// position, its last: seq_pos_min is seq_pos_max).
inline bool has_recurrent_state(MemoryKind m) {
    return m == MemoryKind::recurrent || m == MemoryKind::hybrid || m == MemoryKind::hybrid_sliding_window;
}

}  // namespace kvweld::llamacpp
