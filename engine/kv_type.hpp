// The types a KV cache stores its rows in (llama.cpp's -ctk/-ctv): their
// names on a command line and in a trace, and how far a correct engine's
// logprobs and embeddings may stand from the reference's with each
// (kv_type.cpp).
#pragma once

#include <string>
#include <string_view>

namespace kvweld {

// In a 16-bit type, ggml's CPU attention (flash attention off) also rounds
// the query to it for q.k and the softmax weights for their sum over V: the
// reference rounds the same four, each to nearest even (reference.hpp).
enum class KvType { f32, f16, bf16 };

// |logprob - reference| with F32 KV rows, as the GGUF test's logits.
inline constexpr double kLogprobTolerance = 1e-4;

std::string_view kv_type_name(KvType type);  // "f32", "f16", "bf16"
// Throws Error naming `what`, the text and the names.
KvType parse_kv_type(std::string_view text, std::string_view what);
// With 16-bit rows the reference rounds as ggml does, but a value on a
// rounding boundary may go either way: measured, see its definition.
double kv_tolerance(KvType type);
std::string kv_tolerances();  // each type's, in words

}  // namespace kvweld
