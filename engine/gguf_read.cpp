// Reading the GGUF files kvweld writes (engine/gguf.hpp): F32 tensors of
// the llama architecture, a model or a LoRA adapter. Every count, length,
// offset and shape is checked against the bytes there are before anything
// is allocated or copied; any problem is an Error naming the file and the
// value.
#include "engine/gguf.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/file_bytes.hpp"
#include "engine/gguf_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <variant>

namespace kvweld {

namespace {

constexpr std::uint64_t kMaxCount = 1u << 20;         // tensors or key-value pairs in one file
constexpr std::uint64_t kMaxString = 1u << 16;        // bytes in a key, a name or a string value
constexpr std::size_t kMaxFileBytes = kMaxModelBytes + (std::size_t{1} << 30);

using Value = std::variant<std::int64_t, double, std::string>;  // integers (bool too), floats, strings

struct TensorInfo {
    std::vector<std::uint64_t> ne;
    std::uint64_t offset = 0;
};

struct File {
    std::map<std::string, Value> kvs;  // arrays are skipped
    std::map<std::string, TensorInfo> tensors;
    std::span<const std::byte> data;   // the data section
};

class Reader {
public:
    Reader(std::span<const std::byte> bytes, const std::string& origin) : bytes_(bytes), origin_(origin) {}

    template <class T>
    T pod(const char* what) {
        need(sizeof(T), what);
        T v;
        std::memcpy(&v, bytes_.data() + at_, sizeof v);
        at_ += sizeof v;
        return v;
    }
    std::string str(const char* what) {
        const auto n = pod<std::uint64_t>(what);
        require(n <= kMaxString, "GGUF ", origin_, ": a ", what, " of ", n, " bytes (the limit is ", kMaxString, ")");
        need(std::size_t(n), what);
        std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), std::size_t(n));
        at_ += std::size_t(n);
        return s;
    }
    Value value(std::uint32_t type, const std::string& key, int depth = 0) {
        switch (type) {
            case gguf::u8: return std::int64_t(pod<std::uint8_t>("value"));
            case gguf::i8: return std::int64_t(pod<std::int8_t>("value"));
            case gguf::boolean: return std::int64_t(pod<std::uint8_t>("value"));
            case gguf::u16: return std::int64_t(pod<std::uint16_t>("value"));
            case gguf::i16: return std::int64_t(pod<std::int16_t>("value"));
            case gguf::u32: return std::int64_t(pod<std::uint32_t>("value"));
            case gguf::i32: return std::int64_t(pod<std::int32_t>("value"));
            case gguf::u64: {  // past int64's range: -1, which every integer key refuses
                const auto v = pod<std::uint64_t>("value");
                return v > std::uint64_t(std::numeric_limits<std::int64_t>::max()) ? std::int64_t(-1) : std::int64_t(v);
            }
            case gguf::i64: return pod<std::int64_t>("value");
            case gguf::f32: return double(pod<float>("value"));
            case gguf::f64: return pod<double>("value");
            case gguf::string: return str("string value");
            case gguf::array: {
                require(depth == 0, "GGUF ", origin_, ": key '", key, "' holds an array of arrays");
                const auto elem = pod<std::uint32_t>("array type");
                const auto n = pod<std::uint64_t>("array length");
                // Each element takes at least a byte: a count past the bytes left is corrupt.
                require(n <= bytes_.size() - at_, "GGUF ", origin_, ": key '", key, "' claims ", n,
                        " elements, more than the file's remaining bytes");
                for (std::uint64_t i = 0; i < n; ++i) value(elem, key, depth + 1);
                return std::int64_t(0);
            }
        }
        throw Error(cat("GGUF ", origin_, ": key '", key, "' has value type ", type, ", which GGUF does not define"));
    }
    std::size_t at() const { return at_; }
    void seek(std::size_t at) { at_ = at; }
    std::size_t size() const { return bytes_.size(); }

private:
    void need(std::size_t n, const char* what) const {
        require(n <= bytes_.size() - at_, "GGUF ", origin_, ": truncated: a ", what, " at byte ", at_, " needs ", n,
                " bytes, the file has ", bytes_.size() - at_, " left");
    }
    std::span<const std::byte> bytes_;
    const std::string& origin_;
    std::size_t at_ = 0;
};

File parse_file(std::span<const std::byte> bytes, const std::string& origin) {
    Reader r(bytes, origin);
    const auto magic = r.pod<std::uint32_t>("magic");
    require(magic == gguf::kMagic, "GGUF ", origin, ": not a GGUF file (magic 0x", std::hex, magic, ")");
    const auto version = r.pod<std::uint32_t>("version");
    require(version == 2 || version == 3, "GGUF ", origin, ": version ", version, ", this kvweld reads 2 and 3");
    const auto n_tensors = r.pod<std::uint64_t>("tensor count"), n_kv = r.pod<std::uint64_t>("key-value count");
    require(n_tensors <= kMaxCount && n_kv <= kMaxCount, "GGUF ", origin, ": ", n_tensors, " tensors and ", n_kv,
            " key-value pairs (the limit is ", kMaxCount, " each)");
    File f;
    for (std::uint64_t i = 0; i < n_kv; ++i) {
        std::string key = r.str("key");
        const auto type = r.pod<std::uint32_t>("value type");
        f.kvs[key] = r.value(type, key);
    }
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
        std::string name = r.str("tensor name");
        const auto dims = r.pod<std::uint32_t>("dimension count");
        require(dims >= 1 && dims <= 4, "GGUF ", origin, ": tensor '", name, "' has ", dims, " dimensions (1..4)");
        TensorInfo t;
        for (std::uint32_t d = 0; d < dims; ++d) t.ne.push_back(r.pod<std::uint64_t>("dimension"));
        const auto type = r.pod<std::uint32_t>("tensor type");
        require(type == gguf::kGgmlF32, "GGUF ", origin, ": tensor '", name, "' is of ggml type ", type,
                ", kvweld reads F32 (type 0) only");
        t.offset = r.pod<std::uint64_t>("tensor offset");
        require(f.tensors.emplace(name, t).second, "GGUF ", origin, ": tensor '", name, "' twice");
    }
    std::uint64_t alignment = gguf::kAlignment;
    if (const auto it = f.kvs.find("general.alignment"); it != f.kvs.end()) {
        const auto* a = std::get_if<std::int64_t>(&it->second);
        require(a && *a > 0 && *a <= 65536 && (*a & (*a - 1)) == 0, "GGUF ", origin,
                ": general.alignment must be a power of two up to 65536");
        alignment = std::uint64_t(*a);
    }
    const std::size_t start = std::size_t((r.at() + alignment - 1) / alignment * alignment);
    require(start <= r.size(), "GGUF ", origin, ": truncated before its data section");
    f.data = bytes.subspan(start);
    return f;
}

std::int64_t int_kv(const File& f, const std::string& key, const std::string& origin, std::optional<std::int64_t> fallback) {
    const auto it = f.kvs.find(key);
    if (it == f.kvs.end()) {
        require(fallback.has_value(), "GGUF ", origin, ": no key '", key, "'");
        return *fallback;
    }
    const auto* v = std::get_if<std::int64_t>(&it->second);
    require(v && *v >= 0 && *v <= (1 << 30), "GGUF ", origin, ": key '", key, "' is not an integer in 0..", 1 << 30);
    return *v;
}

double float_kv(const File& f, const std::string& key, const std::string& origin, std::optional<double> fallback) {
    const auto it = f.kvs.find(key);
    if (it == f.kvs.end()) {
        require(fallback.has_value(), "GGUF ", origin, ": no key '", key, "'");
        return *fallback;
    }
    const auto* v = std::get_if<double>(&it->second);
    require(v && std::isfinite(*v), "GGUF ", origin, ": key '", key, "' is not a finite float");
    return *v;
}

std::string string_kv(const File& f, const std::string& key, const std::string& origin) {
    const auto it = f.kvs.find(key);
    require(it != f.kvs.end(), "GGUF ", origin, ": no key '", key, "'");
    const auto* v = std::get_if<std::string>(&it->second);
    require(v != nullptr, "GGUF ", origin, ": key '", key, "' is not a string");
    return *v;
}

void require_llama_arch(const File& f, const std::string& origin) {
    const std::string arch = string_kv(f, "general.architecture", origin);
    require(arch == "llama", "GGUF ", origin, ": architecture '", arch, "': kvweld reads llama only");
}

ModelConfig config_of(const File& f, const std::string& origin) {
    require_llama_arch(f, origin);
    ModelConfig c;
    auto i = [&](const char* key, std::optional<std::int64_t> fallback = std::nullopt) {
        return int(int_kv(f, cat("llama.", key), origin, fallback));
    };
    c.dim = i("embedding_length");
    c.n_layers = i("block_count");
    c.ffn_dim = i("feed_forward_length");
    c.n_heads = i("attention.head_count");
    c.n_kv_heads = i("attention.head_count_kv", c.n_heads);
    c.head_dim = i("rope.dimension_count", c.n_heads > 0 ? c.dim / c.n_heads : 0);
    c.max_seq_len = i("context_length");
    const auto embd = f.tensors.find("token_embd.weight");
    const std::int64_t vocab_from_embd = embd != f.tensors.end() && embd->second.ne.size() == 2
                                             ? std::int64_t(std::min<std::uint64_t>(embd->second.ne[1], 1u << 30))
                                             : 0;
    c.vocab = i("vocab_size", vocab_from_embd);
    c.norm_eps = float(float_kv(f, "llama.attention.layer_norm_rms_epsilon", origin, 1e-5));
    c.rope_theta = float(float_kv(f, "llama.rope.freq_base", origin, 10000.0));
    c.n_experts = i("expert_count", 0);
    c.n_experts_used = i("expert_used_count", 0);
    try {
        c.validate();
    } catch (const Error& e) {
        throw Error(cat("GGUF ", origin, ": its keys describe an impossible model: ", e.what()));
    }
    return c;
}

std::string shape_text(const std::vector<std::uint64_t>& ne) {
    std::string out;
    for (std::uint64_t n : ne) out += cat(out.empty() ? "" : ", ", n);
    return cat("[", out, "]");
}

// Copies tensor `t` of the file into `out` (t.data.size() floats): present,
// of its shape, inside the data section, finite.
void copy_tensor(const File& f, const gguf::Tensor& t, float* out, const std::string& origin) {
    const auto it = f.tensors.find(t.name);
    require(it != f.tensors.end(), "GGUF ", origin, ": no tensor '", t.name, "'");
    const TensorInfo& info = it->second;
    require(info.ne == t.ne, "GGUF ", origin, ": tensor '", t.name, "' has shape ", shape_text(info.ne),
            ", the model needs ", shape_text(t.ne));
    const std::size_t bytes = t.data.size_bytes();
    require(info.offset <= f.data.size() && bytes <= f.data.size() - info.offset, "GGUF ", origin, ": tensor '", t.name,
            "' at offset ", info.offset, " runs past the end of the file");
    std::memcpy(out, f.data.data() + info.offset, bytes);
    for (std::size_t k = 0; k < t.data.size(); ++k)
        require(std::isfinite(out[k]), "GGUF ", origin, ": tensor '", t.name, "' holds a value that is not finite");
}

// The file holds no tensor but the table's.
void require_only(const File& f, const std::vector<gguf::Tensor>& table, const std::string& origin) {
    for (const auto& entry : f.tensors) {
        const std::string& name = entry.first;  // not a structured binding: clang before 16 cannot capture one
        require(std::any_of(table.begin(), table.end(), [&](const gguf::Tensor& t) { return t.name == name; }),
                "GGUF ", origin, ": tensor '", name, "' is not one kvweld reads for this model");
    }
}

}  // namespace

Model parse_gguf(std::span<const std::byte> bytes, const std::string& origin, pmr::memory_resource* resource) {
    const File f = parse_file(bytes, origin);
    const ModelConfig c = config_of(f, origin);
    const bool shared = !f.tensors.count("output.weight");
    // Every weight is in the file: a header that claims more is corrupt
    // (checked before the model is allocated).
    const std::size_t weights = Model::weight_count(c, shared);
    require(weights <= f.data.size() / sizeof(float), "GGUF ", origin, ": its keys describe ", weights,
            " weights, more than its ", f.data.size(), " bytes of data hold: ", c.describe());
    Model model = Model::zeros(c, shared, resource);
    std::vector<gguf::Tensor> table = gguf::model_tensors(model);
    if (shared) std::erase_if(table, [](const gguf::Tensor& t) { return t.name == "output.weight"; });
    require_only(f, table, origin);
    // The table's spans view the model's own buffer: each is written at its offset there.
    const float* base = model.all_weights().data();
    for (const gguf::Tensor& t : table) copy_tensor(f, t, model.all_weights_mut().data() + (t.data.data() - base), origin);
    return model;
}

Model load_gguf(const std::string& path, pmr::memory_resource* resource) {
    return parse_gguf(read_file(path, kMaxFileBytes, "GGUF"), path, resource);
}

std::shared_ptr<const LoraAdapter> parse_gguf_lora(std::span<const std::byte> bytes, const ModelConfig& model,
                                                   const std::string& origin) {
    const File f = parse_file(bytes, origin);
    require_llama_arch(f, origin);
    require(string_kv(f, "general.type", origin) == "adapter" && string_kv(f, "adapter.type", origin) == "lora",
            "GGUF ", origin, ": not a LoRA adapter (general.type and adapter.type must be 'adapter' and 'lora')");
    const float alpha = float(float_kv(f, "adapter.lora.alpha", origin, std::nullopt));
    const auto first = f.tensors.find("blk.0.attn_q.weight.lora_a");
    require(first != f.tensors.end() && first->second.ne.size() == 2, "GGUF ", origin,
            ": no tensor 'blk.0.attn_q.weight.lora_a' of two dimensions to take the rank from");
    const auto rank = first->second.ne[1];
    require(rank >= 1 && rank <= 256, "GGUF ", origin, ": rank ", rank, " out of range 1..256");
    auto adapter = std::make_shared<LoraAdapter>(model, int(rank), alpha);
    const std::vector<gguf::Tensor> table = gguf::lora_tensors(*adapter);
    require_only(f, table, origin);
    // The table's spans view this adapter's own matrices, which it was just
    // made with and nothing else holds yet.
    for (const gguf::Tensor& t : table) copy_tensor(f, t, const_cast<float*>(t.data.data()), origin);
    return adapter;
}

std::shared_ptr<const LoraAdapter> load_gguf_lora(const std::string& path, const ModelConfig& model) {
    return parse_gguf_lora(read_file(path, kMaxFileBytes, "LoRA adapter"), model, path);
}

}  // namespace kvweld
