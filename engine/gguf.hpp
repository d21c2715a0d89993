// Exports a model as GGUF (version 3), the file format llama.cpp loads: the
// `llama` architecture, F32 tensors in llama2.c's layout (no q/k
// permutation: kvweld's RoPE rotates adjacent pairs, as llama.cpp's `llama`
// architecture does), and no vocabulary (`tokenizer.ggml.model = "none"`
// with `llama.vocab_size`) or llama.cpp's dummy test one (Vocab below). The harness computes its reference from the same
// weights. Only the llama family: llama.cpp's qwen3 rotates half-split
// pairs, so a qwen3 model is an Error naming that.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kvweld {

// The vocabulary a model file carries: none (tokenizer.ggml.model "none",
// which every release loads, but a generated token aborts llama.cpp at its
// first detokenization), or llama.cpp's dummy "test" tokenizer
// (LLAMA_VOCAB_TYPE_TEST: one token "tok_<id>" per id, text is the id in
// hex; no BOS or EOS), which llama-server generates with; b11434 and
// 0.3.36 load it, 0.3.16 refuses it ("unknown tokenizer: 'test'").
enum class Vocab { none, test };
std::vector<std::byte> serialize_gguf(const Model& model, Vocab vocab = Vocab::none);
void save_gguf(const Model& model, const std::string& path, Vocab vocab = Vocab::none);
// A LoRA adapter as llama.cpp's adapter GGUF (general.type "adapter").
std::vector<std::byte> serialize_gguf_lora(const LoraAdapter& adapter);

// Reading them back (engine/gguf_read.cpp): F32 tensors of the llama
// architecture as kvweld writes them (engine/gguf_layout.hpp). A model
// without output.weight shares its embedding as the classifier. An
// adapter must be for `model`'s shape and adapt every matrix kvweld adapts.
// Anything else is an Error naming the file and the value.
Model parse_gguf(std::span<const std::byte> bytes, const std::string& origin,
                 pmr::memory_resource* resource = nullptr);
Model load_gguf(const std::string& path, pmr::memory_resource* resource = nullptr);
std::shared_ptr<const LoraAdapter> parse_gguf_lora(std::span<const std::byte> bytes, const ModelConfig& model,
                                                   const std::string& origin);
std::shared_ptr<const LoraAdapter> load_gguf_lora(const std::string& path, const ModelConfig& model);

}  // namespace kvweld
