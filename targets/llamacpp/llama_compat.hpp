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
// A function or a field is detected with a requires-expression (below).
// Where neither form of a feature exists, kHas* is false and the plugin
// does not declare the capability.
//
// The reproducers carry this text stripped to what each program uses
// (targets/strip_features.hpp): a block under `#if KVWELD_USES(F)` stays
// where the program uses F. Compiled as a header every block is in. A
// program with sampler chains calls llama.h's sampler functions directly:
// it shows a finding only where they exist.
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

// A function llama.h may lack is called unqualified with an argument of
// llama.h's own types, so that its name is looked up where the template is
// used (argument-dependent lookup): a requires-expression is true where it
// exists, and a branch that names a missing one is discarded unbuilt.
#if KVWELD_USES(PLUGIN)
template <class C> inline constexpr bool kSetAdapters = requires(C* c, llama_adapter_lora** a, float* s) {
    llama_set_adapters_lora(c, a, std::size_t{}, s);
};
template <class C> inline constexpr bool kLora = kSetAdapters<C> || requires(C* c, llama_adapter_lora* a) {
    llama_set_adapter_lora(c, a, 0.0f);
};
template <class C> inline constexpr bool kCvec = requires(C* c, const float* d) {
    llama_set_adapter_cvec(c, d, std::size_t{}, 0, 0, 0);
} || requires(C* c, const float* d) { llama_apply_adapter_cvec(c, d, std::size_t{}, 0, 0, 0); };
template <class C> inline constexpr bool kSamplers = requires(C* c, llama_sampler* s) {
    llama_set_sampler(c, llama_seq_id{}, s);
    llama_get_sampled_token_ith(c, int32_t{});
};
template <class P> concept outputs_per_seq = requires(P p) { p.n_outputs_max_per_seq; };
inline constexpr bool kHasLora = kLora<llama_context>;
inline constexpr bool kHasCvec = kCvec<llama_context>;
inline constexpr bool kHasBackendSampling = kSamplers<llama_context> && outputs_per_seq<llama_context_params>;

// A sequence's backend sampler chain (nullptr: none); llama.cpp's answer
// (false: it cannot offload the chain). False where llama.h has no such call.
template <class C = llama_context>
bool set_sampler(C* ctx, llama_seq_id seq, llama_sampler* chain) {
    if constexpr (kSamplers<C>)
        return llama_set_sampler(ctx, seq, chain);
    else
        return false;
}

// The token the backend sampled for batch index i (LLAMA_TOKEN_NULL: none).
template <class C = llama_context>
llama_token sampled_token(C* ctx, int32_t i) {
    if constexpr (kSamplers<C>)
        return llama_get_sampled_token_ith(ctx, i);
    else
        return -1;
}
#endif

#if KVWELD_USES(LORA)
// The adapters every later decode runs with (none: empty), with their
// scales. Returns llama.cpp's status (0: applied). Up to 0.3.16, one
// adapter per call (every release kvweld drives has one of the two forms;
// the plugin declares LoRA only where one is: kHasLora).
template <class C = llama_context>
int32_t set_adapters(C* ctx, std::vector<llama_adapter_lora*> adapters, std::vector<float> scales) {
    if constexpr (requires { llama_set_adapters_lora(ctx, adapters.data(), adapters.size(), scales.data()); }) {
        return llama_set_adapters_lora(ctx, adapters.data(), adapters.size(), scales.data());
    } else {
        int32_t rc = (llama_clear_adapter_lora(ctx), 0);
        for (size_t i = 0; i < adapters.size() && rc == 0; ++i) rc = llama_set_adapter_lora(ctx, adapters[i], scales[i]);
        return rc;
    }
}
#endif

#if KVWELD_USES(CVEC)
// The control vector (data NULL: none), llama.cpp's layout from layer 1.
// Up to 0.3.16 llama_apply_adapter_cvec (the same arguments).
template <class C = llama_context>
int32_t set_cvec(C* ctx, const float* data, std::size_t len, int32_t n_embd, int32_t il_start, int32_t il_end) {
    if constexpr (requires { llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end); }) return llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
    else return llama_apply_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
}
#endif

// Flash attention on or off, whichever field this llama.h has (the enum's
// ENABLED is 1, DISABLED 0).
template <class P>
void set_flash_attn(P& p, bool on) {
    if constexpr (requires { p.flash_attn_type; }) p.flash_attn_type = decltype(p.flash_attn_type)(on ? 1 : 0);
    else p.flash_attn = on;
}

#if KVWELD_USES(PLUGIN)
// A recurrent memory's snapshots per sequence for rollback
// (llama_context_params::n_rs_seq, b11434); false where there is no such field.
template <class P>
bool set_rs_seq(P& p, uint32_t n) {
    if constexpr (requires { p.n_rs_seq; }) {
        p.n_rs_seq = n;
        return true;
    } else {
        return false;
    }
}
#endif

#if KVWELD_USES(SAMPLER)
// Backend sampling's outputs per sequence and decode: every output row
// (0: n_outputs_max; llama.cpp's default is 1, which refuses a call with
// two sampled rows of one sequence: a prefill asking for every row, or
// drafts). Nothing where the release has no backend sampling.
template <class P>
void sample_every_output(P& p) { if constexpr (requires { p.n_outputs_max_per_seq; }) p.n_outputs_max_per_seq = 0; }
#endif

}  // namespace kvweld::llama_compat
