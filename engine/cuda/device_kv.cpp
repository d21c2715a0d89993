#include "engine/cuda/device_kv.hpp"

namespace kvweld::cuda {

DeviceKv::DeviceKv(std::size_t floats) : key_(floats), value_(floats) {}

DeviceKv& DeviceKv::of(KvStorage& storage) {
    const auto lock = device_lock();
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
    out->key_.copy_from(key_, key_.size());
    out->value_.copy_from(value_, value_.size());
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
