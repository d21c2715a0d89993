#include "engine/cuda/device_model.hpp"

#include <map>
#include <mutex>

namespace kvweld::cuda {

namespace {

// Appends a tensor at a 4-float (16-byte) boundary; returns its offset.
std::size_t append_aligned(std::vector<float>& dst, std::span<const float> src) {
    dst.resize((dst.size() + 3) / 4 * 4, 0.0f);
    const std::size_t at = dst.size();
    dst.insert(dst.end(), src.begin(), src.end());
    return at;
}

struct HostPack {
    std::vector<float> data;
    struct Layer {
        std::size_t att_norm, wqkv, q_norm, k_norm, wo, ffn_norm, w13, w2;
    };
    std::vector<Layer> layers;
    std::size_t embedding = 0, final_norm = 0, classifier = 0;
};

HostPack pack(const Model& model) {
    HostPack p;
    const ModelConfig& c = model.config();
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights w = model.layer(l);
        HostPack::Layer o{};
        o.att_norm = append_aligned(p.data, w.att_norm);
        o.wqkv = append_aligned(p.data, w.wq);
        // k and v rows follow q's directly: one fused [q+2kv][dim] matrix.
        p.data.insert(p.data.end(), w.wk.begin(), w.wk.end());
        p.data.insert(p.data.end(), w.wv.begin(), w.wv.end());
        o.q_norm = append_aligned(p.data, w.q_norm);
        o.k_norm = append_aligned(p.data, w.k_norm);
        o.wo = append_aligned(p.data, w.wo);
        o.ffn_norm = append_aligned(p.data, w.ffn_norm);
        o.w13 = append_aligned(p.data, w.w1);
        p.data.insert(p.data.end(), w.w3.begin(), w.w3.end());
        o.w2 = append_aligned(p.data, w.w2);
        p.layers.push_back(o);
    }
    p.final_norm = append_aligned(p.data, model.final_norm());
    p.classifier = append_aligned(p.data, model.classifier());
    p.embedding = model.shared_classifier() ? p.classifier : append_aligned(p.data, model.embedding());
    return p;
}

}  // namespace

DeviceModel::DeviceModel(const Model& model) : id_(model.id()), config_(model.config()) {
    require_device();
    const HostPack p = pack(model);
    weights_ = DeviceBuffer<float>(p.data.size());
    weights_.upload(p.data.data(), p.data.size());
    const float* base = weights_.get();
    for (const HostPack::Layer& o : p.layers)
        layers_.push_back({base + o.att_norm, base + o.wqkv, base + o.q_norm, base + o.k_norm, base + o.wo,
                           base + o.ffn_norm, base + o.w13, base + o.w2});
    embedding_ = base + p.embedding;
    final_norm_ = base + p.final_norm;
    classifier_ = base + p.classifier;
}

std::shared_ptr<const DeviceModel> DeviceModel::of(const Model& model) {
    // Keyed by the never-recycled id: a reload can never alias an old upload.
    static std::mutex mutex;
    static std::map<ModelInstanceId, std::weak_ptr<const DeviceModel>> registry;
    const std::lock_guard lock(mutex);
    if (auto held = registry[model.id()].lock()) return held;
    auto fresh = std::make_shared<const DeviceModel>(model);
    registry[model.id()] = fresh;
    std::erase_if(registry, [](const auto& entry) { return entry.second.expired(); });
    return fresh;
}

}  // namespace kvweld::cuda
