// The GGUF files kvweld writes and reads (engine/gguf.hpp): the format's
// constants, and the one table per file of which tensor holds which weights,
// by llama.cpp's names and shapes. The writer writes a model's (or an
// adapter's) tensors from the table; the reader fills a model's (or an
// adapter's) from the same table, so the two cannot disagree.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvweld::gguf {

inline constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF"
inline constexpr std::uint32_t kGgmlF32 = 0;         // the one tensor type kvweld writes and reads
inline constexpr std::uint64_t kAlignment = 32;      // GGUF's default general.alignment

// GGUF's value types.
enum Type : std::uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10,
    i64 = 11, f64 = 12,
};

struct Tensor {
    std::string name;
    std::vector<std::uint64_t> ne;  // ggml order: ne[0] is the contiguous (input) dimension
    std::span<const float> data;    // where the weights are (in the model or adapter)
};

// A model's tensors: token_embd, per layer attn_norm, attn_q/k/v, attn_output,
// ffn_norm and the dense ffn_gate/up/down or an MoE layer's ffn_gate_inp and
// ffn_{gate,up,down}_exps, then output_norm and output.
std::vector<Tensor> model_tensors(const Model& m);
// An adapter's: "<tensor>.lora_a" [r][n_in] and ".lora_b" [n_out][r] per
// adapted matrix (those of rank 0 left out).
std::vector<Tensor> lora_tensors(const LoraAdapter& adapter);

}  // namespace kvweld::gguf
