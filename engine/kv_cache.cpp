#include "engine/kv_cache.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/cpu_kernels.hpp"
#include "engine/faults.hpp"

#include <algorithm>

namespace kvweld {

KvGeometry KvGeometry::of(const ModelConfig& c) {
    return KvGeometry{c.n_layers, c.n_kv_heads, c.head_dim, c.max_seq_len, Dtype::f32};
}

std::size_t KvGeometry::bytes() const {
    return std::size_t{2} * sizeof(float) * static_cast<std::size_t>(n_layers) *
           static_cast<std::size_t>(max_seq_len) * static_cast<std::size_t>(kv_dim());
}

namespace {

// Checked before the storage's vectors are built: a refused size allocates nothing.
int checked_rows(int max_seq_len, int kv_dim) {
    require(max_seq_len > 0 && kv_dim > 0, "KvStorage [", max_seq_len, " x ", kv_dim, "]: dims must be positive");
    const std::size_t bytes = std::size_t{2} * sizeof(float) * static_cast<std::size_t>(max_seq_len) *
                              static_cast<std::size_t>(kv_dim);
    require(bytes <= kMaxCacheBytes, "KvStorage [", max_seq_len, " x ", kv_dim, "] needs ", bytes,
            " bytes: the limit is ", kMaxCacheBytes);
    return max_seq_len;
}

}  // namespace

KvStorage::KvStorage(int max_seq_len, int kv_dim, Dtype dtype)
    : max_seq_len_(checked_rows(max_seq_len, kv_dim)),
      kv_dim_(kv_dim),
      dtype_(dtype),
      serial_(StorageSerial::mint()),
      key_(static_cast<std::size_t>(max_seq_len) * kv_dim, 0.0f),
      value_(static_cast<std::size_t>(max_seq_len) * kv_dim, 0.0f) {}

std::shared_ptr<KvStorage> KvStorage::copy() const {
    auto out = std::make_shared<KvStorage>(max_seq_len_, kv_dim_, dtype_);
    out->key_ = key_;
    out->value_ = value_;
    if (device_) out->device_ = device_->clone();
    return out;
}

KvCache KvCache::with_capacity(const ModelConfig& config) {
    config.validate();
    return with_capacity(KvGeometry::of(config));
}

namespace {

void require_dim(int value, const char* name, int limit) {
    require(value > 0 && value <= limit, "KvGeometry.", name, " = ", value, ": must be in 1..", limit);
}

}  // namespace

KvCache KvCache::with_capacity(const KvGeometry& g) {
    // The same limits as ModelConfig::validate(): no cache can serve more.
    require_dim(g.n_layers, "n_layers", 1024);
    require_dim(g.n_kv_heads, "n_kv_heads", 1024);
    require_dim(g.head_dim, "head_dim", 4096);
    require_dim(g.max_seq_len, "max_seq_len", 1 << 20);
    // Each dimension may be in range while their product is not.
    require(g.bytes() <= kMaxCacheBytes, "KV cache of ", g.n_layers, " layers x ", g.max_seq_len, " positions x ",
            g.kv_dim(), " floats (K and V) needs ", g.bytes(), " bytes: the limit is ", kMaxCacheBytes);
    return KvCache(g);
}

KvCache::KvCache(const KvGeometry& geometry) : geometry_(geometry) { clear(); }

KvLayer KvCache::fresh_layer() const {
    return std::make_shared<KvStorage>(geometry_.max_seq_len, geometry_.kv_dim(), geometry_.dtype);
}

void KvCache::clear() {
    std::vector<KvLayer> fresh;
    fresh.reserve(geometry_.n_layers);
    for (int i = 0; i < geometry_.n_layers; ++i) fresh.push_back(fresh_layer());
    layers_ = std::move(fresh);
    cached_len_ = 0;
    owed_.clear();
    // The fault keeps the old id: a held plan then never notices the swap.
    if (!alloc_id_ || !fault_on(Fault::no_remint_on_clear)) alloc_id_ = KvAllocId::mint();
}

void KvCache::require_layer_index(int i) const {
    require(i >= 0 && i < geometry_.n_layers,
            "layer index ", i, " out of range: the cache has ", geometry_.n_layers, " layers");
}

void KvCache::set_layer(int i, KvLayer layer) {
    require_layer_index(i);
    require(layer != nullptr, "set_layer(", i, "): the layer is null");
    require(layer->max_seq_len() == geometry_.max_seq_len && layer->kv_dim() == geometry_.kv_dim(),
            "set_layer(", i, "): layer shape [", layer->max_seq_len(), " x ", layer->kv_dim(),
                "] does not match the cache's [", geometry_.max_seq_len, " x ", geometry_.kv_dim(),
                "]");
    require(layer->dtype() == geometry_.dtype,
            "set_layer(", i, "): layer dtype ", to_string(layer->dtype()),
                " does not match the cache's ", to_string(geometry_.dtype));
    layers_[i] = std::move(layer);
    if (!fault_on(Fault::no_remint_on_set_layer)) alloc_id_ = KvAllocId::mint();
}

void KvCache::truncate_to(int n) {
    require(n >= 0 && n <= cached_len_,
            "truncate_to(", n, "): must be in 0..cached_len = ", cached_len_);
    cached_len_ = n;
    if (!owed_.empty()) std::fill(owed_.begin() + n, owed_.end(), 0);  // a row written anew owes nothing
    // The fault re-mints: every speculative reject then forces a spurious rebuild.
    if (fault_on(Fault::remint_on_truncate)) alloc_id_ = KvAllocId::mint();
}

void KvCache::require_room() const {
    require(cached_len_ < geometry_.max_seq_len,
            "cache full: position ", cached_len_, " >= max_seq_len ", geometry_.max_seq_len);
}

void KvCache::advance() {
    require_room();
    ++cached_len_;
}

void KvCache::shift(int p0, int p1) {
    require(p0 >= 0 && p0 <= p1 && p1 <= cached_len_, "shift: positions [", p0, ", ", p1,
            ") must lie in 0..cached_len = ", cached_len_, " with p0 <= p1");
    if (p0 == p1) return;
    const int moved = cached_len_ - p1, delta = p1 - p0;
    const auto row_floats = std::size_t(geometry_.kv_dim());
    for (const KvLayer& l : layers_) {
        if (l->device()) l->device()->download(*l, 0, cached_len_);  // the device copy is current
        std::copy_n(l->key_row(p1), std::size_t(moved) * row_floats, l->key_row(p0));
        std::copy_n(l->value_row(p1), std::size_t(moved) * row_floats, l->value_row(p0));
        if (l->device() && moved > 0) l->device()->upload(*l, p0, moved);
    }
    owed_.resize(std::size_t(geometry_.max_seq_len), 0);
    for (int i = p0; i < p0 + moved; ++i)
        // The fault forgets a rotation still owed from an earlier shift.
        owed_[std::size_t(i)] = (fault_on(Fault::shift_delta_overwritten) ? 0 : owed_[std::size_t(i + delta)]) - delta;
    std::fill(owed_.begin() + p0 + moved, owed_.end(), 0);
    cached_len_ -= delta;
    if (fault_on(Fault::shift_remints_id)) alloc_id_ = KvAllocId::mint();
}

bool KvCache::settled() const {
    return std::all_of(owed_.begin(), owed_.end(), [](int d) { return d == 0; });
}

void KvCache::settle(float rope_theta) {
    for (int pos = 0; pos < int(owed_.size()); ++pos) {
        int& delta = owed_[std::size_t(pos)];
        if (delta == 0) continue;
        for (const KvLayer& l : layers_) {
            // The fault moves the row without its rotation.
            if (!fault_on(Fault::shift_rotation_skipped))
                cpu::rotate_by(l->key_row(pos), geometry_.n_kv_heads, geometry_.head_dim, delta, rope_theta);
            if (l->device()) l->device()->upload(*l, pos, 1);
        }
        delta = 0;
    }
}

void KvCache::overwrite(int len, std::span<const float> rows) {
    const auto row_floats = std::size_t(geometry_.kv_dim());
    require(len >= 0 && len <= geometry_.max_seq_len, "overwrite: ", len, " rows, the capacity is ",
            geometry_.max_seq_len);
    const std::size_t per_layer = 2 * std::size_t(len) * row_floats;
    require(rows.size() == per_layer * std::size_t(geometry_.n_layers), "overwrite: ", rows.size(),
            " floats for ", len, " rows of ", geometry_.n_layers, " layers (", per_layer * std::size_t(geometry_.n_layers),
            " needed)");
    for (int l = 0; l < geometry_.n_layers; ++l) {
        KvStorage& s = *layers_[std::size_t(l)];
        const float* from = rows.data() + std::size_t(l) * per_layer;
        std::copy_n(from, std::size_t(len) * row_floats, s.key_row(0));
        std::copy_n(from + std::size_t(len) * row_floats, std::size_t(len) * row_floats, s.value_row(0));
        if (s.device() && len > 0) s.device()->upload(s, 0, len);
    }
    owed_.clear();
    cached_len_ = len;
}

const KvLayer& KvCache::layer(int i) const {
    require_layer_index(i);
    return layers_[i];
}

std::vector<StorageSerial> KvCache::storage_serials() const {
    std::vector<StorageSerial> out;
    out.reserve(layers_.size());
    for (const KvLayer& l : layers_) out.push_back(l->serial());
    return out;
}

}  // namespace kvweld
