// A model: config plus fp32 weights in one buffer, laid out in llama2.c's
// checkpoint order. Every constructed or loaded model mints a new
// ModelInstanceId; a model cannot be copied (a copy would share the id).
#pragma once

#include "engine/config.hpp"
#include "engine/ids.hpp"

#include <boost/container/pmr/memory_resource.hpp>
#include <boost/container/pmr/vector.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kvweld {

namespace pmr = boost::container::pmr;

struct LayerWeights {
    std::span<const float> att_norm;  // [dim]
    std::span<const float> wq;        // [q_dim][dim]
    std::span<const float> wk;        // [kv_dim][dim]
    std::span<const float> wv;        // [kv_dim][dim]
    std::span<const float> wo;        // [dim][q_dim]
    std::span<const float> q_norm;    // [head_dim], qwen3 only
    std::span<const float> k_norm;    // [head_dim], qwen3 only
    std::span<const float> ffn_norm;  // [dim]
    // Feed-forward; an MoE layer holds n_experts of each, back to back.
    std::span<const float> w1;        // [experts][ffn][dim] gate
    std::span<const float> w2;        // [experts][dim][ffn] down
    std::span<const float> w3;        // [experts][ffn][dim] up
    std::span<const float> router;    // [n_experts][dim], MoE only

    // Expert e's share of w1, w2 or w3 (of `experts` equal parts).
    static std::span<const float> expert(std::span<const float> w, int e, int experts) {
        const std::size_t n = w.size() / static_cast<std::size_t>(experts);
        return w.subspan(static_cast<std::size_t>(e) * n, n);
    }
};

// No model kvweld builds may hold more fp32 weights than this (4 GiB): a
// config past it is an Error before anything is allocated.
inline constexpr std::size_t kMaxModelBytes = std::size_t{4} << 30;

class Model {
public:
    // Deterministic weights from seed, scaled so activations stay finite
    // over max_seq_len tokens. `resource` places the weight buffer (the
    // weight_pointer_key fault uses a pool that recycles addresses).
    static Model random(const ModelConfig& config, std::uint64_t seed,
                        pmr::memory_resource* resource = nullptr);
    // Zero weights of the right shape; the checkpoint reader fills them.
    static Model zeros(const ModelConfig& config, bool shared_classifier,
                       pmr::memory_resource* resource = nullptr);

    Model(Model&&) = default;
    Model& operator=(Model&&) = default;
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    // Number of floats in the weight buffer of such a model.
    static std::size_t weight_count(const ModelConfig& config, bool shared_classifier);

    const ModelConfig& config() const { return config_; }
    ModelInstanceId id() const { return id_; }
    bool shared_classifier() const { return shared_classifier_; }

    std::span<const float> embedding() const;   // [vocab][dim]
    std::span<const float> final_norm() const;  // [dim]
    std::span<const float> classifier() const;  // [vocab][dim]
    LayerWeights layer(int l) const;

    // The whole buffer, in checkpoint order (qwen3 norms, then MoE routers,
    // after the classifier).
    std::span<const float> all_weights() const { return {data_.data(), data_.size()}; }
    std::span<float> all_weights_mut() { return {data_.data(), data_.size()}; }
    // The buffer's address: an identity only the weight_pointer_key fault uses.
    const void* weight_address() const { return data_.data(); }

private:
    struct Offsets;
    Model(const ModelConfig& config, bool shared_classifier, pmr::memory_resource* resource);
    std::span<const float> slice(std::size_t offset, std::size_t count) const;
    static Offsets offsets_for(const ModelConfig& config, bool shared_classifier);
    Offsets offsets() const;

    ModelConfig config_;
    bool shared_classifier_ = true;
    ModelInstanceId id_;
    pmr::vector<float> data_;
};

// FNV-1a over the weights' bytes: the model's identity by content (a state
// export names the model it came from by it). Slow: computed once per
// loaded model where it is needed.
std::uint64_t weight_digest(const Model& model);

}  // namespace kvweld
