#include "engine/adapter_file.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "engine/file_bytes.hpp"
#include "engine/gguf.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

namespace kvweld {

namespace {

constexpr std::uint32_t kMagic = 0x414c564b;  // "KVLA"
constexpr std::int32_t kVersion = 1;
constexpr std::size_t kHeaderInts = 9;
constexpr std::size_t kHeaderBytes = kHeaderInts * sizeof(std::int32_t) + sizeof(float);
// No adapter kvweld writes comes near this; a larger file is not one.
constexpr std::size_t kMaxLoraBytes = std::size_t{1} << 30;

std::size_t matrix_floats(const ModelConfig& c, int rank, LoraTarget t) {
    const auto [n_out, n_in] = lora_shape(c, t);
    return lora_adapts(c, t) ? std::size_t(rank) * (std::size_t(n_in) + std::size_t(n_out)) : 0;
}

}  // namespace

std::vector<std::byte> serialize_lora(const LoraAdapter& adapter) {
    const ModelConfig& c = adapter.config();
    const std::int32_t header[kHeaderInts] = {std::int32_t(kMagic), kVersion,    c.dim,        c.n_layers,
                                              c.n_heads,            c.n_kv_heads, c.head_dim, c.ffn_dim,
                                              adapter.rank()};
    std::vector<std::byte> out;
    auto put = [&out](const void* p, std::size_t n) {
        const auto* b = static_cast<const std::byte*>(p);
        out.insert(out.end(), b, b + n);
    };
    put(header, sizeof header);
    const float alpha = adapter.alpha();
    put(&alpha, sizeof alpha);
    for (int l = 0; l < c.n_layers; ++l)
        for (int t = 0; t < kLoraTargets; ++t) {
            const LoraMatrix& m = adapter.matrix(l, LoraTarget(t));
            put(m.a.data(), m.a.size() * sizeof(float));
            put(m.b.data(), m.b.size() * sizeof(float));
        }
    return out;
}

void save_lora(const LoraAdapter& adapter, const std::string& path, const std::string& format) {
    if (format == "gguf") return write_file(path, serialize_gguf_lora(adapter), "LoRA adapter");
    require(format == "llama2c", "LoRA adapter: no file format for models in '", format, "' (gguf or llama2c)");
    write_file(path, serialize_lora(adapter), "LoRA adapter");
}

std::shared_ptr<const LoraAdapter> parse_lora(std::span<const std::byte> bytes, const ModelConfig& model,
                                              const std::string& origin) {
    require(bytes.size() >= kHeaderBytes, "LoRA adapter ", origin, ": file is ", bytes.size(), " bytes, shorter than the ",
            kHeaderBytes, "-byte header");
    std::int32_t h[kHeaderInts];
    std::memcpy(h, bytes.data(), sizeof h);
    float alpha = 0;
    std::memcpy(&alpha, bytes.data() + sizeof h, sizeof alpha);
    require(std::uint32_t(h[0]) == kMagic, "LoRA adapter ", origin, ": not a kvweld LoRA file (magic ", h[0], ")");
    require(h[1] == kVersion, "LoRA adapter ", origin, ": version ", h[1], ", this kvweld reads version ", kVersion);
    const char* names[] = {"dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim"};
    const int want[] = {model.dim, model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim, model.ffn_dim};
    for (std::size_t i = 0; i < std::size(want); ++i)
        require(h[2 + i] == want[i], "LoRA adapter ", origin, ": ", names[i], " ", h[2 + i], " is not the model's ",
                want[i]);
    const int rank = h[8];
    require(rank >= 1 && rank <= 256, "LoRA adapter ", origin, ": rank ", rank, " out of range 1..256");
    require(std::isfinite(alpha), "LoRA adapter ", origin, ": alpha is not finite");
    std::size_t floats = 0;
    for (int t = 0; t < kLoraTargets; ++t) floats += matrix_floats(model, rank, LoraTarget(t));
    const std::size_t expected = kHeaderBytes + floats * std::size_t(model.n_layers) * sizeof(float);
    require(bytes.size() == expected, "LoRA adapter ", origin, ": file is ", bytes.size(), " bytes but its header (rank ",
            rank, ") needs ", expected, " (", bytes.size() < expected ? "truncated" : "oversized", ")");
    auto out = std::make_shared<LoraAdapter>(model, rank, alpha);
    const std::byte* src = bytes.data() + kHeaderBytes;
    auto take = [&](std::vector<float>& dst) {
        std::memcpy(dst.data(), src, dst.size() * sizeof(float));
        src += dst.size() * sizeof(float);
        for (float x : dst) require(std::isfinite(x), "LoRA adapter ", origin, ": a weight is not finite");
    };
    for (int l = 0; l < model.n_layers; ++l)
        for (int t = 0; t < kLoraTargets; ++t) {
            LoraMatrix& m = out->matrix_mut(l, LoraTarget(t));
            take(m.a);
            take(m.b);
        }
    return out;
}

std::shared_ptr<const LoraAdapter> load_lora(const std::string& path, const ModelConfig& model) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    require(in.good(), "LoRA adapter ", path, ": cannot open the file");
    const auto size = std::size_t(in.tellg());
    require(size <= kMaxLoraBytes, "LoRA adapter ", path, ": file is ", size, " bytes, past the limit of ", kMaxLoraBytes);
    in.seekg(0);
    std::vector<char> raw(size);
    in.read(raw.data(), std::streamsize(size));
    require(!in.bad() && std::size_t(in.gcount()) == size, "LoRA adapter ", path, ": read error");
    return parse_lora(std::as_bytes(std::span<const char>(raw)), model, path);
}

}  // namespace kvweld
