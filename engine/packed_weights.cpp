#include "engine/packed_weights.hpp"

#include <cmath>

namespace kvweld {

namespace {

// Appends tensors back to back, the first at a 16-float (64-byte) boundary;
// returns the first one's offset.
template <class Vector, class... Spans>
std::size_t append(Vector& dst, const Spans&... parts) {
    dst.resize((dst.size() + 15) / 16 * 16, 0.0f);
    const std::size_t at = dst.size();
    (dst.insert(dst.end(), parts.begin(), parts.end()), ...);
    return at;
}

}  // namespace

PackedWeights pack_weights(const Model& model) {
    PackedWeights p;
    const ModelConfig& c = model.config();
    p.data.reserve(model.all_weights().size() + 16 * 8 * static_cast<std::size_t>(c.n_layers + 2));
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights w = model.layer(l);
        PackedWeights::Layer o{};
        o.att_norm = append(p.data, w.att_norm);
        o.wqkv = append(p.data, w.wq, w.wk, w.wv);
        o.q_norm = append(p.data, w.q_norm);
        o.k_norm = append(p.data, w.k_norm);
        o.wo = append(p.data, w.wo);
        o.ffn_norm = append(p.data, w.ffn_norm);
        const int n = c.experts_stored();
        for (int e = 0; e < n; ++e) {
            const std::size_t at = append(p.data, LayerWeights::expert(w.w1, e, n), LayerWeights::expert(w.w3, e, n));
            if (e == 0) o.w13 = at;
            if (e == 1) o.w13_stride = at - o.w13;
        }
        for (int e = 0; e < n; ++e) {
            const std::size_t at = append(p.data, LayerWeights::expert(w.w2, e, n));
            if (e == 0) o.w2 = at;
            if (e == 1) o.w2_stride = at - o.w2;
        }
        o.router = append(p.data, w.router);
        p.layers.push_back(o);
    }
    p.final_norm = append(p.data, model.final_norm());
    p.classifier = append(p.data, model.classifier());
    // The embedding rows are read from the classifier copy when they are shared.
    p.embedding = model.shared_classifier() ? p.classifier : append(p.data, model.embedding());
    return p;
}

std::vector<float> rope_table(const ModelConfig& c, int rows) {
    const auto hd = static_cast<std::size_t>(c.head_dim);
    std::vector<float> t(static_cast<std::size_t>(rows) * hd);
    for (int pos = 0; pos < rows; ++pos)
        for (std::size_t i = 0; i < hd; i += 2) {
            const double freq = std::pow(static_cast<double>(c.rope_theta), -double(i) / double(hd));
            t[static_cast<std::size_t>(pos) * hd + i] = static_cast<float>(std::cos(pos * freq));
            t[static_cast<std::size_t>(pos) * hd + i + 1] = static_cast<float>(std::sin(pos * freq));
        }
    return t;
}

}  // namespace kvweld
