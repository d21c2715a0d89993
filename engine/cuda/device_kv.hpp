// KV storage on the device: the CUDA DeviceMirror of one KvStorage. The
// storage's serial and its cache's KvAllocId are the host objects' own, so
// the identity rules are exactly the CPU cache's.
#pragma once

#include "engine/cuda/device_buffer.hpp"
#include "engine/kv_cache.hpp"

namespace kvweld::cuda {

class DeviceKv final : public DeviceMirror {
public:
    explicit DeviceKv(std::size_t floats);
    // The storage's device copy, created from its host content on first use.
    static DeviceKv& of(KvStorage& storage);

    std::unique_ptr<DeviceMirror> clone() const override;
    void download(KvStorage& host, int first, int count) const override;
    void upload(const KvStorage& host, int first, int count) override;

    float* key() const { return key_.get(); }
    float* value() const { return value_.get(); }

private:
    DeviceBuffer<float> key_, value_;
};

}  // namespace kvweld::cuda
