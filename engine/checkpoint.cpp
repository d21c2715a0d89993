#include "engine/checkpoint.hpp"

#include "util/file_bytes.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

namespace kvweld {

namespace {

constexpr std::size_t kHeaderBytes = 7 * sizeof(std::int32_t);

struct Header {
    ModelConfig config;
    bool shared_classifier = true;
};

Header parse_header(std::span<const std::byte> bytes, const std::string& origin) {
    require(bytes.size() >= kHeaderBytes,
            "checkpoint ", origin, ": file is ", bytes.size(),
                " bytes, shorter than the 28-byte header");
    std::int32_t h[7];
    std::memcpy(h, bytes.data(), kHeaderBytes);
    Header out;
    ModelConfig& c = out.config;
    c.family = Family::llama;
    c.dim = h[0];
    c.ffn_dim = h[1];
    c.n_layers = h[2];
    c.n_heads = h[3];
    c.n_kv_heads = h[4];
    out.shared_classifier = h[5] > 0;
    // -INT32_MIN overflows: reject it before negating.
    require(h[5] != INT32_MIN, "checkpoint ", origin, ": header vocab_size ", h[5], " is invalid");
    c.vocab = h[5] < 0 ? -h[5] : h[5];
    c.max_seq_len = h[6];
    require(c.n_heads > 0 && c.dim > 0 && c.dim % c.n_heads == 0,
            "checkpoint ", origin, ": header dim ", c.dim, " is not a positive multiple of n_heads ",
                c.n_heads);
    c.head_dim = c.dim / c.n_heads;
    try {
        c.validate();
    } catch (const Error& e) {
        throw Error(cat("checkpoint ", origin, ": header describes an impossible model: ", e.what()));
    }
    return out;
}

// Floats of the legacy RoPE tables (freq_cis_real and freq_cis_imag).
std::size_t rope_table_floats(const ModelConfig& c) {
    return static_cast<std::size_t>(c.max_seq_len) * static_cast<std::size_t>(c.head_dim);
}

std::size_t classifier_floats(const ModelConfig& c) {
    return static_cast<std::size_t>(c.vocab) * static_cast<std::size_t>(c.dim);
}

}  // namespace

Model parse_llama2c(std::span<const std::byte> bytes, const std::string& origin, pmr::memory_resource* resource) {
    const Header header = parse_header(bytes, origin);
    const ModelConfig& c = header.config;
    const std::size_t weights = Model::weight_count(c, header.shared_classifier);
    const std::size_t body = header.shared_classifier ? weights : weights - classifier_floats(c);
    const std::size_t expected =
        kHeaderBytes + (weights + rope_table_floats(c)) * sizeof(float);
    require(bytes.size() == expected,
            "checkpoint ", origin, ": file is ", bytes.size(), " bytes but its header (",
                c.describe(), header.shared_classifier ? ", shared" : ", unshared",
                " classifier) needs exactly ", expected, " bytes (",
                bytes.size() < expected ? "truncated" : "oversized", ")");

    Model model = Model::zeros(c, header.shared_classifier, resource);
    std::span<float> dst = model.all_weights_mut();
    const std::byte* src = bytes.data() + kHeaderBytes;
    std::memcpy(dst.data(), src, body * sizeof(float));
    src += (body + rope_table_floats(c)) * sizeof(float);
    std::memcpy(dst.data() + body, src, (weights - body) * sizeof(float));

    for (std::size_t i = 0; i < dst.size(); ++i) {
        require(std::isfinite(dst[i]),
                "checkpoint ", origin, ": weight ", i, " of ", dst.size(), " is not finite (",
                    dst[i], ")");
    }
    return model;
}

Model load_llama2c(const std::string& path, pmr::memory_resource* resource) {
    std::ifstream in(path, std::ios::binary);
    require(in.good(), "checkpoint ", path, ": cannot open the file");
    std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    require(!in.bad(), "checkpoint ", path, ": read error");
    return parse_llama2c(std::as_bytes(std::span<const char>(raw)), path, resource);
}

std::vector<std::byte> serialize_llama2c(const Model& model) {
    const ModelConfig& c = model.config();
    require(c.family == Family::llama,
            "llama2.c checkpoints hold llama-family models only, not ", to_string(c.family));
    require(c.q_dim() == c.dim, "llama2.c checkpoints need dim == n_heads * head_dim");
    require(!c.moe(), "llama2.c checkpoints hold dense models only, not ", c.describe(),
            " (a mixture of experts goes to GGUF)");
    const std::int32_t vocab = model.shared_classifier() ? c.vocab : -c.vocab;
    const std::int32_t h[7] = {c.dim, c.ffn_dim, c.n_layers, c.n_heads, c.n_kv_heads, vocab,
                               c.max_seq_len};
    const std::span<const float> w = model.all_weights();
    const std::size_t body = model.shared_classifier() ? w.size() : w.size() - classifier_floats(c);
    const std::vector<float> rope(rope_table_floats(c), 0.0f);

    std::vector<std::byte> out;
    auto put = [&out](const void* p, std::size_t n) {
        const auto* b = static_cast<const std::byte*>(p);
        out.insert(out.end(), b, b + n);
    };
    put(h, sizeof h);
    put(w.data(), body * sizeof(float));
    put(rope.data(), rope.size() * sizeof(float));
    put(w.data() + body, (w.size() - body) * sizeof(float));
    return out;
}

void save_llama2c(const Model& model, const std::string& path) {
    write_file(path, serialize_llama2c(model), "checkpoint");
}

}  // namespace kvweld
