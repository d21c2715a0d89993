#include "engine/model.hpp"

#include "util/error.hpp"
#include "util/rng.hpp"

#include <boost/container/pmr/global_resource.hpp>

#include <algorithm>
#include <cmath>

namespace kvweld {

// Offsets of each tensor group, in llama2.c's checkpoint order. Per-layer
// groups hold n_layers tensors back to back.
struct Model::Offsets {
    std::size_t embedding, att_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3, final_norm,
        classifier, q_norm, k_norm, router, end;
};

namespace {

std::size_t sz(int v) { return static_cast<std::size_t>(v); }

}  // namespace

Model::Offsets Model::offsets_for(const ModelConfig& c, bool shared_classifier) {
    const std::size_t L = sz(c.n_layers), d = sz(c.dim), q = sz(c.q_dim()), kv = sz(c.kv_dim()),
                      f = sz(c.ffn_dim) * sz(c.experts_stored());
    Offsets o{};
    o.embedding = 0;
    o.att_norm = o.embedding + sz(c.vocab) * d;
    o.wq = o.att_norm + L * d;
    o.wk = o.wq + L * q * d;
    o.wv = o.wk + L * kv * d;
    o.wo = o.wv + L * kv * d;
    o.ffn_norm = o.wo + L * d * q;
    o.w1 = o.ffn_norm + L * d;
    o.w2 = o.w1 + L * f * d;
    o.w3 = o.w2 + L * d * f;
    o.final_norm = o.w3 + L * f * d;
    o.classifier = o.final_norm + d;
    o.q_norm = o.classifier + (shared_classifier ? 0 : sz(c.vocab) * d);
    const std::size_t norms = c.family == Family::qwen3 ? L * sz(c.head_dim) : 0;
    o.k_norm = o.q_norm + norms;
    o.router = o.k_norm + norms;
    o.end = o.router + L * sz(c.n_experts) * d;
    return o;
}

Model::Model(const ModelConfig& config, bool shared_classifier, pmr::memory_resource* resource)
    : config_(config),
      shared_classifier_(shared_classifier),
      id_(ModelInstanceId::mint()),
      data_(resource ? resource : pmr::get_default_resource()) {
    config_.validate();
    const std::size_t bytes = offsets().end * sizeof(float);
    require(bytes <= kMaxModelBytes, "model of ", offsets().end, " weights (", bytes, " bytes) exceeds the limit of ",
            kMaxModelBytes, " bytes: ", config_.describe());
    // default_init then one fill: a pmr vector's element-wise construction
    // is slow in instrumented (fuzz) builds, and models are built per input.
    data_.resize(offsets().end, boost::container::default_init);
    std::fill(data_.data(), data_.data() + data_.size(), 0.0f);
}

std::size_t Model::weight_count(const ModelConfig& config, bool shared_classifier) {
    return offsets_for(config, shared_classifier).end;
}

Model::Offsets Model::offsets() const { return offsets_for(config_, shared_classifier_); }

Model Model::zeros(const ModelConfig& config, bool shared_classifier,
                   pmr::memory_resource* resource) {
    return Model(config, shared_classifier, resource);
}

Model Model::random(const ModelConfig& config, std::uint64_t seed,
                    pmr::memory_resource* resource) {
    Model m(config, /*shared_classifier=*/false, resource);
    const Offsets o = m.offsets();
    Rng rng(seed);
    float* w = m.data_.data();
    auto fill = [&](std::size_t from, std::size_t to, float scale) {
        for (std::size_t i = from; i < to; ++i) w[i] = rng.symmetric(scale);
    };
    auto fill_norm = [&](std::size_t from, std::size_t to) {
        for (std::size_t i = from; i < to; ++i) w[i] = 1.0f + rng.symmetric(0.2f);
    };
    // Uniform(-a, a) has variance a^2/3: a = sqrt(3/fan_in) keeps unit gain.
    auto gain = [](int fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
    const ModelConfig& c = config;
    fill(o.embedding, o.att_norm, 1.0f);
    fill_norm(o.att_norm, o.wq);
    fill(o.wq, o.wk, gain(c.dim));
    fill(o.wk, o.wv, gain(c.dim));
    fill(o.wv, o.wo, gain(c.dim));
    fill(o.wo, o.ffn_norm, 0.5f * gain(c.q_dim()));  // damp the residual stream
    fill_norm(o.ffn_norm, o.w1);
    fill(o.w1, o.w2, gain(c.dim));
    fill(o.w2, o.w3, 0.5f * gain(c.ffn_dim));
    fill(o.w3, o.final_norm, gain(c.dim));
    fill_norm(o.final_norm, o.classifier);
    fill(o.classifier, o.q_norm, 2.0f * gain(c.dim));  // logits of order 1
    fill_norm(o.q_norm, o.router);
    fill(o.router, o.end, gain(c.dim));  // router logits of order 1: warmup (all four weighed) shows
    return m;
}

std::span<const float> Model::slice(std::size_t offset, std::size_t count) const {
    return {data_.data() + offset, count};
}

std::span<const float> Model::embedding() const {
    return slice(offsets().embedding, sz(config_.vocab) * sz(config_.dim));
}

std::span<const float> Model::final_norm() const {
    return slice(offsets().final_norm, sz(config_.dim));
}

std::span<const float> Model::classifier() const {
    if (shared_classifier_) return embedding();
    return slice(offsets().classifier, sz(config_.vocab) * sz(config_.dim));
}

LayerWeights Model::layer(int l) const {
    const ModelConfig& c = config_;
    const Offsets o = offsets();
    const std::size_t i = sz(l), d = sz(c.dim), q = sz(c.q_dim()), kv = sz(c.kv_dim()),
                      f = sz(c.ffn_dim) * sz(c.experts_stored()), h = sz(c.head_dim), e = sz(c.n_experts);
    LayerWeights w;
    w.att_norm = slice(o.att_norm + i * d, d);
    w.wq = slice(o.wq + i * q * d, q * d);
    w.wk = slice(o.wk + i * kv * d, kv * d);
    w.wv = slice(o.wv + i * kv * d, kv * d);
    w.wo = slice(o.wo + i * d * q, d * q);
    w.ffn_norm = slice(o.ffn_norm + i * d, d);
    w.w1 = slice(o.w1 + i * f * d, f * d);
    w.w2 = slice(o.w2 + i * d * f, d * f);
    w.w3 = slice(o.w3 + i * f * d, f * d);
    if (c.family == Family::qwen3) {
        w.q_norm = slice(o.q_norm + i * h, h);
        w.k_norm = slice(o.k_norm + i * h, h);
    }
    if (c.moe()) w.router = slice(o.router + i * e * d, e * d);
    return w;
}

std::uint64_t weight_digest(const Model& model) {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (std::byte b : std::as_bytes(model.all_weights())) h = (h ^ std::to_integer<std::uint64_t>(b)) * 0x100000001b3ULL;
    return h;
}

}  // namespace kvweld
