// Exports a model as GGUF (version 3), the file format llama.cpp loads: the
// `llama` architecture, F32 tensors in llama2.c's layout (no q/k
// permutation: kvweld's RoPE rotates adjacent pairs, as llama.cpp's `llama`
// architecture does), and no vocabulary (`tokenizer.ggml.model = "none"`
// with `llama.vocab_size`). The harness computes its reference from the same
// weights. Only the llama family: llama.cpp's qwen3 rotates half-split
// pairs, so a qwen3 model is an Error naming that.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace kvweld {

std::vector<std::byte> serialize_gguf(const Model& model);
void save_gguf(const Model& model, const std::string& path);
// A LoRA adapter as llama.cpp's adapter GGUF (general.type "adapter").
std::vector<std::byte> serialize_gguf_lora(const LoraAdapter& adapter);

}  // namespace kvweld
