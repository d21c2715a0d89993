// The CPU backend's plan: an op list over plan-owned prepared weights
// (q/k/v and gate/up fused into single matrices), scratch buffers, a RoPE
// table, and the pinned KV storage it is welded to.
#pragma once

#include "engine/model.hpp"
#include "engine/packed_weights.hpp"
#include "engine/plan.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvweld {

class CpuPlan final : public Plan {
public:
    CpuPlan(const Model& model, const KvCache& cache);

    void rebind(std::span<const KvLayer> layers) override;
    std::span<const float> run(const StepParams& step) override;
    std::vector<StorageSerial> bound_serials() const override;

    std::size_t op_count() const { return ops_.size(); }

private:
    enum class OpKind : std::uint8_t {
        embed, attn_norm, qkv, qk_norm, rope, kv_write, attention, out_proj, residual,
        ffn_norm, gate_up, swiglu, down_proj, final_norm, classifier,
    };
    struct Op {
        OpKind kind;
        int layer;
    };
    void build_ops();
    void exec(const Op& op, const StepParams& step);
    void attention(int layer, int mask_len);
    const float* w(std::size_t offset) const { return weights_.data.data() + offset; }

    ModelConfig config_;
    std::vector<Op> ops_;
    PackedWeights weights_;    // the plan's own copy: a model swap must be caught by the key
    std::vector<float> rope_;  // [max_seq_len][head_dim]: cos, sin pairs
    std::vector<KvLayer> kv_;  // the welded KV storage, pinned
    // scratch
    std::vector<float> x_, xb_, qkv_, att_, proj_, h13_, scores_, logits_;
};

}  // namespace kvweld
