// llama2.c `run.c` checkpoint format: a 7 x int32 header (dim, hidden_dim,
// n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative vocab_size
// means an unshared classifier), then fp32 weights in run.c's order, the
// legacy RoPE tables (skipped), and the classifier when unshared.
#pragma once

#include "engine/model.hpp"

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace kvweld {

// Loads a checkpoint; a short, oversized or corrupt file gets an Error
// naming what is wrong. Mints a new ModelInstanceId.
// `resource` places the weights (as in Model::random).
Model load_llama2c(const std::string& path, pmr::memory_resource* resource = nullptr);
Model parse_llama2c(std::span<const std::byte> bytes, const std::string& origin = "<memory>",
                    pmr::memory_resource* resource = nullptr);

// Writes a llama-family model in the same format (tests and seed corpora).
std::vector<std::byte> serialize_llama2c(const Model& model);
void save_llama2c(const Model& model, const std::string& path);

}  // namespace kvweld
