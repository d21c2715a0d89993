#include "engine/cuda/device_kv.hpp"

namespace kvweld::cuda {

DeviceKv::DeviceKv(std::size_t floats) : key_(floats), value_(floats) {}

DeviceKv& DeviceKv::of(KvStorage& storage) {
    if (auto* mirror = dynamic_cast<DeviceKv*>(storage.device())) return *mirror;
    const std::size_t floats = static_cast<std::size_t>(storage.max_seq_len()) * storage.kv_dim();
    auto mirror = std::make_unique<DeviceKv>(floats);
    mirror->key_.upload(storage.key_row(0), floats);
    mirror->value_.upload(storage.value_row(0), floats);
    DeviceKv& out = *mirror;
    storage.set_device(std::move(mirror));
    return out;
}

std::unique_ptr<DeviceMirror> DeviceKv::clone() const {
    auto out = std::make_unique<DeviceKv>(key_.size());
    KVWELD_CUDA_CHECK(cudaMemcpy(out->key_.get(), key_.get(), key_.size() * sizeof(float), cudaMemcpyDeviceToDevice));
    KVWELD_CUDA_CHECK(cudaMemcpy(out->value_.get(), value_.get(), value_.size() * sizeof(float), cudaMemcpyDeviceToDevice));
    return out;
}

void DeviceKv::download(KvStorage& host, int first, int count) const {
    const std::size_t floats = static_cast<std::size_t>(count) * host.kv_dim();
    const std::size_t offset = static_cast<std::size_t>(first) * host.kv_dim();
    key_.download(host.key_row(first), floats, offset);
    value_.download(host.value_row(first), floats, offset);
}

void DeviceKv::upload(const KvStorage& host, int first, int count) {
    const std::size_t floats = static_cast<std::size_t>(count) * host.kv_dim();
    const std::size_t offset = static_cast<std::size_t>(first) * host.kv_dim();
    key_.upload(host.key_row(first), floats, offset);
    value_.upload(host.value_row(first), floats, offset);
}

}  // namespace kvweld::cuda
