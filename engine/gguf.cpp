#include "engine/gguf.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/file_bytes.hpp"
#include "engine/gguf_layout.hpp"

#include <cstring>
#include <string_view>

namespace kvweld {

namespace {

using gguf::kAlignment;
using gguf::Tensor;

class Writer {
public:
    template <class T>
    void pod(T v) {
        const auto* p = reinterpret_cast<const std::byte*>(&v);
        out_.insert(out_.end(), p, p + sizeof v);
    }
    void str(std::string_view s) {
        pod<std::uint64_t>(s.size());
        const auto* p = reinterpret_cast<const std::byte*>(s.data());
        out_.insert(out_.end(), p, p + s.size());
    }
    void floats(std::span<const float> v) {
        const auto* p = reinterpret_cast<const std::byte*>(v.data());
        out_.insert(out_.end(), p, p + v.size_bytes());
    }
    void pad() { out_.resize((out_.size() + kAlignment - 1) / kAlignment * kAlignment, std::byte{0}); }
    std::vector<std::byte> take() { return std::move(out_); }

private:
    std::vector<std::byte> out_;
};

std::uint64_t padded(std::uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

void kv_u32(Writer& w, std::string_view key, std::uint32_t v) {
    w.str(key);
    w.pod<std::uint32_t>(gguf::u32);
    w.pod(v);
}

void kv_f32(Writer& w, std::string_view key, float v) {
    w.str(key);
    w.pod<std::uint32_t>(gguf::f32);
    w.pod(v);
}

void kv_str(Writer& w, std::string_view key, std::string_view v) {
    w.str(key);
    w.pod<std::uint32_t>(gguf::string);
    w.str(v);
}

// An array of `n` values of GGUF type `type`, each written by `each(i)`.
template <class Each>
void kv_array(Writer& w, std::string_view key, std::uint32_t type, std::size_t n, Each&& each) {
    w.str(key);
    w.pod<std::uint32_t>(gguf::array);
    w.pod<std::uint32_t>(type);
    w.pod<std::uint64_t>(n);
    for (std::size_t i = 0; i < n; ++i) each(i);
}

// The model's key-value pairs (12, 2 more for an MoE model, 2 more for a vocabulary's tokens and scores).
std::uint64_t model_kv_count(const ModelConfig& c, Vocab vocab) {
    return 12 + (c.moe() ? 2 : 0) + (vocab == Vocab::test ? 2 : 0);
}
void model_kvs(Writer& w, const ModelConfig& c, Vocab vocab) {
    kv_str(w, "general.architecture", "llama");
    kv_u32(w, "llama.vocab_size", std::uint32_t(c.vocab));
    kv_u32(w, "llama.context_length", std::uint32_t(c.max_seq_len));
    kv_u32(w, "llama.embedding_length", std::uint32_t(c.dim));
    kv_u32(w, "llama.block_count", std::uint32_t(c.n_layers));
    kv_u32(w, "llama.feed_forward_length", std::uint32_t(c.ffn_dim));
    kv_u32(w, "llama.attention.head_count", std::uint32_t(c.n_heads));
    kv_u32(w, "llama.attention.head_count_kv", std::uint32_t(c.n_kv_heads));
    kv_u32(w, "llama.rope.dimension_count", std::uint32_t(c.head_dim));
    kv_f32(w, "llama.attention.layer_norm_rms_epsilon", c.norm_eps);
    kv_f32(w, "llama.rope.freq_base", c.rope_theta);
    switch (vocab) {
        case Vocab::none: kv_str(w, "tokenizer.ggml.model", "none"); break;
        case Vocab::test:
            kv_str(w, "tokenizer.ggml.model", "test");
            kv_array(w, "tokenizer.ggml.tokens", gguf::string, std::size_t(c.vocab), [&](std::size_t i) { w.str(cat("tok_", i)); });
            kv_array(w, "tokenizer.ggml.scores", gguf::f32, std::size_t(c.vocab), [&](std::size_t) { w.pod(0.0f); });
            break;
    }
    if (c.moe()) {
        kv_u32(w, "llama.expert_count", std::uint32_t(c.n_experts));
        kv_u32(w, "llama.expert_used_count", std::uint32_t(c.n_experts_used));
    }
}

// A GGUF file: the header, `n_kv` key-value pairs written by `kvs`, the
// tensor infos and the tensors' data, each aligned.
template <class Kvs>
std::vector<std::byte> gguf_file(std::uint64_t n_kv, Kvs&& kvs, const std::vector<Tensor>& tensors) {
    Writer w;
    w.pod<std::uint32_t>(gguf::kMagic);
    w.pod<std::uint32_t>(3);
    w.pod<std::uint64_t>(tensors.size());
    w.pod<std::uint64_t>(n_kv);
    kvs(w);
    std::uint64_t offset = 0;
    for (const Tensor& t : tensors) {
        w.str(t.name);
        w.pod<std::uint32_t>(std::uint32_t(t.ne.size()));
        for (std::uint64_t n : t.ne) w.pod(n);
        w.pod<std::uint32_t>(gguf::kGgmlF32);
        w.pod(offset);
        offset += padded(t.data.size_bytes());
    }
    w.pad();
    for (const Tensor& t : tensors) {
        w.floats(t.data);
        w.pad();
    }
    return w.take();
}

void require_llama(const ModelConfig& c, const char* what) {
    require(c.family == Family::llama, what, ": family ", to_string(c.family),
            " is not supported (llama only: llama.cpp's qwen3 rotates half-split RoPE pairs, kvweld's adjacent ones)");
}

}  // namespace

std::vector<std::byte> serialize_gguf(const Model& model, Vocab vocab) {
    require_llama(model.config(), "GGUF export");
    return gguf_file(model_kv_count(model.config(), vocab), [&](Writer& w) { model_kvs(w, model.config(), vocab); },
                     gguf::model_tensors(model));
}

void save_gguf(const Model& model, const std::string& path, Vocab vocab) {
    write_file(path, serialize_gguf(model, vocab), "GGUF");
}

// llama.cpp's adapter GGUF (llama-adapter.cpp, llama_adapter_lora_init):
// per adapted matrix "<tensor>.lora_a" with ggml ne {n_in, r} and
// ".lora_b" with ne {r, n_out}, that is [r][n_in] and [n_out][r] in numpy
// order: kvweld's own layout.
std::vector<std::byte> serialize_gguf_lora(const LoraAdapter& adapter) {
    const ModelConfig& c = adapter.config();
    require_llama(c, "GGUF LoRA export");
    const std::vector<Tensor> tensors = gguf::lora_tensors(adapter);
    const auto kvs = [&](Writer& w) {
        kv_str(w, "general.architecture", "llama");
        kv_str(w, "general.type", "adapter");
        kv_str(w, "adapter.type", "lora");
        kv_f32(w, "adapter.lora.alpha", adapter.alpha());
    };
    return gguf_file(4, kvs, tensors);
}

}  // namespace kvweld
