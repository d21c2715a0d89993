// KvCache: per-layer K and V storage, the cached length, and the identity
// of the allocation. Storage is held by shared_ptr so a plan can pin the
// buffers it is welded to.
//
//   construct, clear(), set_layer()  => storage replaced => new KvAllocId
//   truncate_to(n)                   => cached_len moves only => same id
//   shift(p0, p1), overwrite(...)    => rows rewritten in place => same id
//
// A context shift removes positions [p0, p1) and moves the later rows down.
// Keys are stored rotated for their positions (RoPE), so each moved key
// row owes a rotation by the positions it moved; the owed deltas add up
// over shifts and are applied by settle(), which every decode runs first
// (llama.cpp's K-shift is applied at the next decode's memory update the
// same way). The plan stays valid: the rotation is data, the storage and
// its id are the ones it was built on.
#pragma once

#include "engine/config.hpp"
#include "engine/ids.hpp"

#include <memory>
#include <span>
#include <vector>

namespace kvweld {

// No KV cache may hold more than this (4 GiB of K and V over all layers);
// one layer's storage is bounded by the same figure.
inline constexpr std::size_t kMaxCacheBytes = std::size_t{4} << 30;

struct KvGeometry {
    int n_layers = 0;
    int n_kv_heads = 0;
    int head_dim = 0;
    int max_seq_len = 0;
    Dtype dtype = Dtype::f32;

    int kv_dim() const { return n_kv_heads * head_dim; }
    std::size_t bytes() const;  // K and V over all layers
    static KvGeometry of(const ModelConfig& config);
    friend bool operator==(const KvGeometry&, const KvGeometry&) = default;
};

class KvStorage;

// A copy of one KvStorage kept on a device by a backend (CUDA). Created
// from the host content at the storage's first device bind; from then on
// the device copy is the one plans read and write. Dies with the storage.
class DeviceMirror {
public:
    virtual ~DeviceMirror() = default;
    // A new device buffer with the same content (for KvStorage::copy()).
    virtual std::unique_ptr<DeviceMirror> clone() const = 0;
    // Copies the device content of rows [first, first + count) back into
    // the same host rows.
    virtual void download(KvStorage& host, int first, int count) const = 0;
    // Copies host rows [first, first + count) to the device copy.
    virtual void upload(const KvStorage& host, int first, int count) = 0;
};

// One layer's K and V: [max_seq_len][kv_dim] each, zeroed at birth, with a
// never-recycled storage serial (the weld oracle's handle; never a pointer).
// Non-positive dims or more than kMaxCacheBytes are an Error.
class KvStorage {
public:
    KvStorage(int max_seq_len, int kv_dim, Dtype dtype = Dtype::f32);

    int max_seq_len() const { return max_seq_len_; }
    int kv_dim() const { return kv_dim_; }
    Dtype dtype() const { return dtype_; }
    StorageSerial serial() const { return serial_; }

    float* key_row(int pos) { return key_.data() + static_cast<std::size_t>(pos) * kv_dim_; }
    float* value_row(int pos) { return value_.data() + static_cast<std::size_t>(pos) * kv_dim_; }
    const float* key_row(int pos) const { return key_.data() + static_cast<std::size_t>(pos) * kv_dim_; }
    const float* value_row(int pos) const {
        return value_.data() + static_cast<std::size_t>(pos) * kv_dim_;
    }
    // A new buffer with the same content and a new serial (swap-in / restore).
    std::shared_ptr<KvStorage> copy() const;

    // The backend's device copy, if any (see DeviceMirror).
    DeviceMirror* device() const { return device_.get(); }
    void set_device(std::unique_ptr<DeviceMirror> mirror) { device_ = std::move(mirror); }

private:
    int max_seq_len_;
    int kv_dim_;
    Dtype dtype_;
    StorageSerial serial_;
    std::vector<float> key_;
    std::vector<float> value_;
    std::unique_ptr<DeviceMirror> device_;
};

using KvLayer = std::shared_ptr<KvStorage>;

class KvCache {
public:
    static KvCache with_capacity(const ModelConfig& config);
    static KvCache with_capacity(const KvGeometry& geometry);

    const KvGeometry& geometry() const { return geometry_; }
    int cached_len() const { return cached_len_; }
    KvAllocId alloc_id() const { return alloc_id_; }
    int n_layers() const { return geometry_.n_layers; }

    // Replaces all storage with fresh zeroed storage; cached_len = 0; new id.
    void clear();
    // Replaces layer i's storage. Geometry and dtype must match, else Error
    // and nothing changes. New id.
    void set_layer(int i, KvLayer layer);
    // n <= cached_len, else Error. Touches no storage; same id.
    void truncate_to(int n);
    // Records that the token at position cached_len has been written.
    // Appending past capacity is an Error, never a wrap.
    void advance();
    // Throws the "cache full" Error when no position is left.
    void require_room() const;
    // Removes positions [p0, p1): 0 <= p0 <= p1 <= cached_len, else Error
    // naming the bound, and nothing changes.
    void shift(int p0, int p1);
    // Applies the rotations the moved key rows owe (theta: the model's
    // rope_theta), in the device copy too.
    void settle(float rope_theta);
    bool settled() const;
    // Replaces the content with `len` rows per layer read from `rows`:
    // per layer, len key rows then len value rows, kv_dim floats each (a
    // state import). len > max_seq_len or a wrong size is an Error and
    // nothing changes.
    void overwrite(int len, std::span<const float> rows);

    const KvLayer& layer(int i) const;
    std::vector<StorageSerial> storage_serials() const;

private:
    explicit KvCache(const KvGeometry& geometry);
    void require_layer_index(int i) const;
    KvLayer fresh_layer() const;

    KvGeometry geometry_;
    std::vector<KvLayer> layers_;
    int cached_len_ = 0;
    KvAllocId alloc_id_;
    std::vector<int> owed_;  // per position: the rotation its key row owes (empty: none owed)
};

}  // namespace kvweld
