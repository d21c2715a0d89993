#include "engine/cuda/device_model.hpp"

#include "engine/packed_weights.hpp"

#include <map>

namespace kvweld::cuda {

DeviceModel::DeviceModel(const Model& model) : id_(model.id()), config_(model.config()) {
    require_device();
    const PackedWeights p = pack_weights(model);
    weights_ = DeviceBuffer<float>(p.data.size());
    weights_.upload(p.data.data(), p.data.size());
    const float* base = weights_.get();
    for (const PackedWeights::Layer& o : p.layers)
        layers_.push_back({base + o.att_norm, base + o.wqkv, base + o.q_norm, base + o.k_norm, base + o.wo,
                           base + o.ffn_norm, base + o.w13, base + o.w2});
    embedding_ = base + p.embedding;
    final_norm_ = base + p.final_norm;
    classifier_ = base + p.classifier;
}

std::shared_ptr<const DeviceModel> DeviceModel::of(const Model& model) {
    // Keyed by the never-recycled id: a reload can never alias an old upload.
    // The device lock guards the registry too: one lock, one order.
    static std::map<ModelInstanceId, std::weak_ptr<const DeviceModel>> registry;
    const auto lock = device_lock();
    if (auto held = registry[model.id()].lock()) return held;
    auto fresh = std::make_shared<const DeviceModel>(model);
    registry[model.id()] = fresh;
    std::erase_if(registry, [](const auto& entry) { return entry.second.expired(); });
    return fresh;
}

}  // namespace kvweld::cuda
