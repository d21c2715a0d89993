// What the installed llama.h has, detected at build time, so the plugin
// compiles against every llama-cpp-python release from 0.3.15 (the first
// whose llama.cpp reuses graphs) to the newest with no per-release code.
// The differences met there, each with the release that changed it:
//
// - LoRA adapters: llama_set_adapter_lora (one adapter and scale per call)
//   with llama_clear_adapter_lora, up to 0.3.16; llama_set_adapters_lora
//   (the whole set, which compares before it changes anything) from 0.3.20.
// - Control vector: llama_apply_adapter_cvec up to 0.3.16,
//   llama_set_adapter_cvec (the same arguments) from 0.3.20.
// - Flash attention: a bool `flash_attn` up to 0.3.16, an enum
//   `flash_attn_type` from 0.3.20.
// - Backend samplers per sequence (llama_set_sampler,
//   llama_get_sampled_token_ith): not in 0.3.16; from 0.3.20, but up to
//   0.3.32 with one sampled row per sequence in a call (llama_context::decode
//   refuses a second: src/llama-context.cpp:1723 in 0.3.32), which a call
//   with drafts needs; llama_context_params::n_outputs_max_per_seq lifts
//   it in 0.3.36. The plugin declares samplers only where that field is.
//
// A function is detected by overload resolution: fallbacks with the same
// name, declared here as templates returning Missing, lose to a real
// declaration (a non-template exact match) and win only where llama.h has
// none. A field is detected with a requires-expression. Where neither form
// of a feature exists, kHas* is false and the plugin does not declare the
// capability.
#pragma once

#include <llama.h>

#include <cstddef>
#include <type_traits>

// At global scope, so that a using-directive puts them beside llama.h's own.
namespace kvweld_llama_fallback {
struct Missing {};
template <class... A> Missing llama_set_adapters_lora(A...);
template <class... A> Missing llama_set_adapter_lora(A...);
template <class... A> Missing llama_clear_adapter_lora(A...);
template <class... A> Missing llama_set_adapter_cvec(A...);
template <class... A> Missing llama_apply_adapter_cvec(A...);
template <class... A> Missing llama_set_sampler(A...);
template <class... A> Missing llama_get_sampled_token_ith(A...);
}  // namespace kvweld_llama_fallback

namespace kvweld::llama_compat {

namespace probe {
using namespace ::kvweld_llama_fallback;
template <class C> using set_adapters = decltype(llama_set_adapters_lora(
    (C*)nullptr, (llama_adapter_lora**)nullptr, std::size_t{}, (float*)nullptr));
template <class C> using set_adapter = decltype(llama_set_adapter_lora((C*)nullptr, (llama_adapter_lora*)nullptr, 0.0f));
template <class C> using set_cvec = decltype(llama_set_adapter_cvec((C*)nullptr, (const float*)nullptr, std::size_t{},
                                                                    int32_t{}, int32_t{}, int32_t{}));
template <class C> using apply_cvec = decltype(llama_apply_adapter_cvec((C*)nullptr, (const float*)nullptr,
                                                                        std::size_t{}, int32_t{}, int32_t{}, int32_t{}));
template <class C> using set_sampler = decltype(llama_set_sampler((C*)nullptr, llama_seq_id{}, (llama_sampler*)nullptr));
template <class C> using sampled_token = decltype(llama_get_sampled_token_ith((C*)nullptr, int32_t{}));
template <class T> inline constexpr bool found = !std::is_same_v<T, ::kvweld_llama_fallback::Missing>;
}  // namespace probe

inline constexpr bool kHasSetAdapters = probe::found<probe::set_adapters<llama_context>>;
inline constexpr bool kHasLora = kHasSetAdapters || probe::found<probe::set_adapter<llama_context>>;
inline constexpr bool kHasSetCvec = probe::found<probe::set_cvec<llama_context>>;
inline constexpr bool kHasCvec = kHasSetCvec || probe::found<probe::apply_cvec<llama_context>>;
template <class P> concept outputs_per_seq = requires(P p) { p.n_outputs_max_per_seq; };
inline constexpr bool kHasBackendSampling = probe::found<probe::set_sampler<llama_context>> &&
                                            probe::found<probe::sampled_token<llama_context>> &&
                                            outputs_per_seq<llama_context_params>;

// A sequence's backend sampler chain (nullptr: none); llama.cpp's answer
// (false: it cannot offload the chain). False where llama.h has no such call.
template <class C = llama_context>
bool set_sampler(C* ctx, llama_seq_id seq, llama_sampler* chain) {
    using namespace ::kvweld_llama_fallback;
    if constexpr (probe::found<probe::set_sampler<C>>)
        return llama_set_sampler(ctx, seq, chain);
    else
        return false;
}

// The token the backend sampled for batch index i (LLAMA_TOKEN_NULL: none).
template <class C = llama_context>
llama_token sampled_token(C* ctx, int32_t i) {
    using namespace ::kvweld_llama_fallback;
    if constexpr (probe::found<probe::sampled_token<C>>)
        return llama_get_sampled_token_ith(ctx, i);
    else
        return -1;
}

// The adapters every later decode runs with (n may be 0: none). Returns
// llama.cpp's status (0: applied).
template <class C = llama_context>
int32_t set_adapters(C* ctx, llama_adapter_lora** adapters, std::size_t n, float* scales) {
    using namespace ::kvweld_llama_fallback;
    if constexpr (probe::found<probe::set_adapters<C>>) {
        return llama_set_adapters_lora(ctx, adapters, n, scales);
    } else if constexpr (probe::found<probe::set_adapter<C>>) {
        llama_clear_adapter_lora(ctx);
        for (std::size_t i = 0; i < n; ++i)
            if (const int32_t rc = llama_set_adapter_lora(ctx, adapters[i], scales[i]); rc != 0) return rc;
        return 0;
    } else {
        return -1;  // kHasLora is false: the capability is not declared
    }
}

// The control vector (data NULL: none), llama.cpp's layout from layer 1.
template <class C = llama_context>
int32_t set_cvec(C* ctx, const float* data, std::size_t len, int32_t n_embd, int32_t il_start, int32_t il_end) {
    using namespace ::kvweld_llama_fallback;
    if constexpr (probe::found<probe::set_cvec<C>>)
        return llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
    else if constexpr (probe::found<probe::apply_cvec<C>>)
        return llama_apply_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
    else
        return -1;  // kHasCvec is false: the capability is not declared
}

// Flash attention on or off, whichever field this llama.h has.
template <class P>
void set_flash_attn(P& params, bool on) {
    if constexpr (requires { params.flash_attn_type; })
        params.flash_attn_type = decltype(params.flash_attn_type)(on ? 1 : 0);  // ENABLED = 1, DISABLED = 0
    else
        params.flash_attn = on;
}

// Backend sampling's outputs per sequence and decode: every output row
// (0: n_outputs_max; llama.cpp's default is 1, which refuses a call with
// two sampled rows of one sequence: a prefill asking for every row, or
// drafts). Nothing where the release has no backend sampling.
template <class P>
void sample_every_output(P& params) {
    if constexpr (requires { params.n_outputs_max_per_seq; }) params.n_outputs_max_per_seq = 0;
}

}  // namespace kvweld::llama_compat
