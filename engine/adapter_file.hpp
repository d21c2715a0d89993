// LoRA adapters as files, in the format an engine takes models in
// (engine_abi.h's model_format): "gguf", llama.cpp's adapter GGUF
// (engine/gguf.hpp), or "llama2c", kvweld's own: a header of int32 fields
// (magic "KVLA", version 1, dim, n_layers, n_heads, n_kv_heads, head_dim,
// ffn_dim, rank) and float32 alpha, then per layer and per target (attn_q,
// attn_v, ffn_down: engine/adapters.hpp) A [rank][n_in] and B [n_out][rank]
// as float32.
#pragma once

#include "engine/adapters.hpp"

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kvweld {

std::vector<std::byte> serialize_lora(const LoraAdapter& adapter);
void save_lora(const LoraAdapter& adapter, const std::string& path, const std::string& format);
// Reads kvweld's LoRA file for a model of `model`'s shape. A short,
// oversized or corrupt file, or one of another shape, is an Error naming
// the file and what is wrong. Mints a new AdapterId.
std::shared_ptr<const LoraAdapter> parse_lora(std::span<const std::byte> bytes, const ModelConfig& model,
                                              const std::string& origin = "<memory>");
std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const ModelConfig& model);

}  // namespace kvweld
