// A KV pool's storage on the device: the CUDA PoolDeviceMirror of one
// PoolStorage, in the host's layout ([layer][block][offset][kv_dim]). The
// storage's serial and the pool's KvAllocId are the host objects' own, so
// the identity rules are exactly the CPU pool's.
#pragma once

#include "engine/cuda/device_buffer.hpp"
#include "engine/kv_pool.hpp"

namespace kvweld::cuda {

class DevicePool final : public PoolDeviceMirror {
public:
    DevicePool(const PoolStorage& host);
    // The storage's device copy, created from its host content on first use.
    static DevicePool& of(PoolStorage& storage);

    void copy_rows(int from, int to, int rows) override;
    void download(PoolStorage& host) const override;

    // Layer `layer`'s region: [n_blocks][block_size][kv_dim].
    float* key(int layer) const { return key_.get() + layer_offset(layer); }
    float* value(int layer) const { return value_.get() + layer_offset(layer); }
    int n_blocks() const { return n_blocks_; }

private:
    std::size_t layer_offset(int layer) const;
    std::size_t block_offset(int layer, int block) const;

    int n_layers_, kv_dim_, block_size_, n_blocks_;
    DeviceBuffer<float> key_, value_;
};

}  // namespace kvweld::cuda
