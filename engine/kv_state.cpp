#include "engine/kv_state.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <cmath>
#include <cstring>

namespace kvweld {

namespace {

constexpr char kMagic[4] = {'K', 'V', 'W', 'S'};
constexpr std::uint32_t kVersion = 1;

template <class T>
void put(std::vector<std::uint8_t>& out, T value) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
    out.insert(out.end(), p, p + sizeof value);
}

template <class T>
T get(std::span<const std::uint8_t> bytes, std::size_t at) {
    T value;
    std::memcpy(&value, bytes.data() + at, sizeof value);
    return value;
}

}  // namespace

std::vector<std::uint8_t> export_kv_state(const KvCache& cache, std::uint64_t model_digest) {
    require(cache.settled(), "state export: the cache owes shift rotations (settle it first)");
    const KvGeometry& g = cache.geometry();
    const int len = cache.cached_len();
    const std::size_t row = std::size_t(g.kv_dim()) * sizeof(float);
    std::vector<std::uint8_t> out;
    out.reserve(kKvStateHeaderBytes + 2 * std::size_t(g.n_layers) * std::size_t(len) * row);
    for (const char c : kMagic) out.push_back(std::uint8_t(c));  // (gcc 12 misreads a ranged insert of it in a unity build)
    put(out, kVersion);
    put(out, model_digest);
    put(out, std::uint32_t(g.n_layers));
    put(out, std::uint32_t(g.kv_dim()));
    put(out, std::uint32_t(g.dtype));
    put(out, std::uint32_t(len));
    for (int l = 0; l < g.n_layers; ++l) {
        KvStorage& s = *cache.layer(l);
        if (s.device() && len > 0) s.device()->download(s, 0, len);  // the device copy is current
        for (const float* rows : {s.key_row(0), s.value_row(0)}) {
            const auto* p = reinterpret_cast<const std::uint8_t*>(rows);
            out.insert(out.end(), p, p + std::size_t(len) * row);
        }
    }
    return out;
}

void import_kv_state(KvCache& cache, std::span<const std::uint8_t> bytes, std::uint64_t model_digest) {
    const KvGeometry& g = cache.geometry();
    require(bytes.size() >= kKvStateHeaderBytes, "state import: ", bytes.size(), " bytes, less than the ",
            kKvStateHeaderBytes, "-byte header");
    require(std::memcmp(bytes.data(), kMagic, 4) == 0, "state import: not a kvweld sequence state (no KVWS magic)");
    const auto version = get<std::uint32_t>(bytes, 4);
    require(version == kVersion, "state import: version ", version, ", this build reads version ", kVersion);
    const auto digest = get<std::uint64_t>(bytes, 8);
    require(digest == model_digest, "state import: a state of another model (weight digest ", digest,
            "; this engine's model has ", model_digest, ")");
    const auto n_layers = get<std::uint32_t>(bytes, 16), kv_dim = get<std::uint32_t>(bytes, 20),
               dtype = get<std::uint32_t>(bytes, 24), len = get<std::uint32_t>(bytes, 28);
    require(n_layers == std::uint32_t(g.n_layers) && kv_dim == std::uint32_t(g.kv_dim()) &&
                dtype == std::uint32_t(g.dtype),
            "state import: a state of another shape (", n_layers, " layers, kv_dim ", kv_dim, ", dtype ", dtype,
            "; this sequence's: ", g.n_layers, " layers, kv_dim ", g.kv_dim(), ", dtype ", std::uint32_t(g.dtype), ")");
    require(len <= std::uint32_t(g.max_seq_len), "state import: ", len, " positions, this sequence holds at most ",
            g.max_seq_len);
    const std::size_t floats = 2 * std::size_t(n_layers) * std::size_t(len) * kv_dim;  // bounded by the cache's size
    require(bytes.size() == kKvStateHeaderBytes + floats * sizeof(float), "state import: ", bytes.size(),
            " bytes; a state of ", len, " positions is ", kKvStateHeaderBytes + floats * sizeof(float));
    std::vector<float> rows(floats);
    std::memcpy(rows.data(), bytes.data() + kKvStateHeaderBytes, floats * sizeof(float));
    for (std::size_t i = 0; i < floats; ++i)
        require(std::isfinite(rows[i]), "state import: value ", i, " of the rows is ", rows[i], ", not finite");
    cache.overwrite(int(len), rows);
}

}  // namespace kvweld
