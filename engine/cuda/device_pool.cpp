#include "engine/cuda/device_pool.hpp"

namespace kvweld::cuda {

DevicePool::DevicePool(const PoolStorage& host)
    : n_layers_(host.n_layers()), kv_dim_(host.kv_dim()), block_size_(host.block_size()), n_blocks_(host.n_blocks()),
      key_(host.floats()), value_(host.floats()) {
    key_.upload(host.key_block(0, 0), host.floats());
    value_.upload(host.value_block(0, 0), host.floats());
}

DevicePool& DevicePool::of(PoolStorage& storage) {
    const auto lock = device_lock();
    if (auto* mirror = dynamic_cast<DevicePool*>(storage.device())) return *mirror;
    auto mirror = std::make_unique<DevicePool>(storage);
    DevicePool& out = *mirror;
    storage.set_device(std::move(mirror));
    return out;
}

std::size_t DevicePool::layer_offset(int layer) const {
    return std::size_t(layer) * std::size_t(n_blocks_) * std::size_t(block_size_) * std::size_t(kv_dim_);
}

std::size_t DevicePool::block_offset(int layer, int block) const {
    return layer_offset(layer) + std::size_t(block) * std::size_t(block_size_) * std::size_t(kv_dim_);
}

void DevicePool::copy_rows(int from, int to, int rows) {
    const std::size_t bytes = std::size_t(rows) * std::size_t(kv_dim_) * sizeof(float);
    for (int l = 0; l < n_layers_; ++l) {
        copy_and_wait(key_.get() + block_offset(l, to), key_.get() + block_offset(l, from), bytes, cudaMemcpyDeviceToDevice);
        copy_and_wait(value_.get() + block_offset(l, to), value_.get() + block_offset(l, from), bytes,
                      cudaMemcpyDeviceToDevice);
    }
}

void DevicePool::download(PoolStorage& host) const {
    key_.download(host.key_block(0, 0), key_.size());
    value_.download(host.value_block(0, 0), value_.size());
}

}  // namespace kvweld::cuda
