// llama_compat.hpp's calls for the pinned llama.h alone, in C++17: what a
// finding's upstream-style test (tests/test-<id>.cpp in its patch, built in
// llama.cpp's own tree, which compiles C++17) carries in its place
// (kvweld repro --upstream-test). The same names, so the prelude is one
// text for both; stripped to what the test uses (strip_features.hpp).
// Compiled as a header every block is in, against the pinned llama.h
// (llamacpp_repro_prelude_check.cpp).
#pragma once

#ifndef KVWELD_USES
#define KVWELD_USES(feature) 1
#endif

#include <llama.h>

#if KVWELD_USES(CVEC) || KVWELD_USES(PLUGIN)
#include <cstddef>
#endif
#if KVWELD_USES(LORA)
#include <vector>
#endif

namespace kvweld::llama_compat {

#if KVWELD_USES(LORA)
inline int32_t set_adapters(llama_context* ctx, std::vector<llama_adapter_lora*> adapters, std::vector<float> scales) {
    return llama_set_adapters_lora(ctx, adapters.data(), adapters.size(), scales.data());
}
#endif

#if KVWELD_USES(CVEC)
inline int32_t set_cvec(llama_context* ctx, const float* data, std::size_t len, int32_t n_embd, int32_t il_start,
                        int32_t il_end) {
    return llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
}
#endif

inline void set_flash_attn(llama_context_params& params, bool on) {
    params.flash_attn_type = on ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
}

#if KVWELD_USES(SAMPLER)
// Backend sampling of every output row (0: n_outputs_max).
inline void sample_every_output(llama_context_params& params) { params.n_outputs_max_per_seq = 0; }
#endif

}  // namespace kvweld::llama_compat
