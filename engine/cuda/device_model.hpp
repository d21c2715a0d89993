// A model's weights on the device, packed exactly as the CPU plan packs them
// (engine/packed_weights.hpp). Tied to the host model's
// ModelInstanceId: a registry hands every plan of the same model the same
// upload, and a reload (new id) gets a new one. Plans pin what they bake.
#pragma once

#include "engine/cuda/device_buffer.hpp"
#include "engine/model.hpp"

#include <memory>
#include <vector>

namespace kvweld::cuda {

struct DeviceLayer {
    const float *att_norm, *wqkv, *q_norm, *k_norm, *wo, *ffn_norm, *w13, *w2;
};

class DeviceModel {
public:
    explicit DeviceModel(const Model& model);
    // The shared upload for this model instance (uploaded on first use).
    static std::shared_ptr<const DeviceModel> of(const Model& model);

    ModelInstanceId id() const { return id_; }
    const ModelConfig& config() const { return config_; }
    const DeviceLayer& layer(int l) const { return layers_[static_cast<std::size_t>(l)]; }
    const float* embedding() const { return embedding_; }
    const float* final_norm() const { return final_norm_; }
    const float* classifier() const { return classifier_; }
    std::size_t bytes() const { return weights_.size() * sizeof(float); }

private:
    ModelInstanceId id_;
    ModelConfig config_;
    DeviceBuffer<float> weights_;
    std::vector<DeviceLayer> layers_;
    const float *embedding_ = nullptr, *final_norm_ = nullptr, *classifier_ = nullptr;
};

}  // namespace kvweld::cuda
