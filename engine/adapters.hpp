// What a decode runs with besides the model's own weights: LoRA adapters,
// each with a user scale, and a control vector. A held plan depends on
// them, so each is either part of its key or per-step data; kvweld's
// engine takes the cheaper side where it can:
//
//   the adapter set (which adapters)  key: a change mints a new
//                                     AdapterSetId, the plan is Stale{adapters}
//                                     (its op list holds one LoRA op per set)
//   an adapter's scale                step data: a change keeps the plan
//   the control vector (set, change,  step data: the plan adds whatever
//     re-range, clear)                vector the step brings, per layer
//
// llama.cpp (0.3.36) rebuilds its graph on every one of these
// (set_adapters_lora and set_adapter_cvec set sched_need_reserve).
//
// LoRA: for an adapted matrix W, W x + s * (alpha / r) * B (A x), with A
// [r][n_in] and B [n_out][r] (llama.cpp's adapter GGUF: lora_a, lora_b).
// Control vector (llama.cpp's semantics): n_embd floats per layer, added
// to the residual stream after each layer in [start, end], inclusive;
// layer 0 never has one (the data starts at layer 1).
#pragma once

#include "engine/config.hpp"
#include "engine/ids.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kvweld {

// The matrices an adapter may adapt.
enum class LoraTarget : std::uint8_t { wq, wv, w2 };
inline constexpr int kLoraTargets = 3;
std::string_view to_string(LoraTarget t);  // llama.cpp's tensor names: attn_q, attn_v, ffn_down
// The target's shape in `c`: {n_out, n_in}.
std::array<int, 2> lora_shape(const ModelConfig& c, LoraTarget t);
// Whether an adapter of the model has a (non-zero rank) matrix for t.
bool lora_adapts(const ModelConfig& c, LoraTarget t);

struct LoraMatrix {
    int rank = 0;  // 0: this matrix is not adapted
    std::vector<float> a;  // [rank][n_in]
    std::vector<float> b;  // [n_out][rank]
};

class LoraAdapter {
public:
    // Zero matrices of rank `rank` for every target of every layer; a reader fills them.
    LoraAdapter(const ModelConfig& config, int rank, float alpha);
    // Deterministic from `seed`, scaled so that at scale 1 the delta is a
    // fraction of W x (large enough that a stale plan is plain in the logits).
    static std::shared_ptr<const LoraAdapter> random(const ModelConfig& config, int rank, float alpha,
                                                     std::uint64_t seed);
    LoraAdapter(const LoraAdapter&) = delete;  // a copy would share the id
    LoraAdapter& operator=(const LoraAdapter&) = delete;

    AdapterId id() const { return id_; }
    const ModelConfig& config() const { return config_; }
    int rank() const { return rank_; }
    float alpha() const { return alpha_; }
    const LoraMatrix& matrix(int layer, LoraTarget t) const;
    LoraMatrix& matrix_mut(int layer, LoraTarget t);

private:
    ModelConfig config_;
    int rank_;
    float alpha_;
    AdapterId id_ = AdapterId::mint();
    std::vector<LoraMatrix> matrices_;  // [layer][target]
};

struct LoraUse {
    std::shared_ptr<const LoraAdapter> adapter;
    float scale = 1.0f;
    float factor() const { return scale * adapter->alpha() / float(adapter->rank()); }
};

struct ControlVector {
    std::vector<float> data;  // [n_layers][dim]; layer 0's row is never added
    int dim = 0;
    int start = 1, end = 0;   // layers, inclusive
    bool applies(int layer) const { return layer >= 1 && layer >= start && layer <= end; }
    const float* row(int layer, int dim) const { return data.data() + std::size_t(layer) * std::size_t(dim); }
    static ControlVector random(const ModelConfig& config, std::uint64_t seed, int start, int end);
    friend bool operator==(const ControlVector&, const ControlVector&) = default;
};

// The adapter state an engine decodes with, and llama.cpp's warmup switch
// (an MoE model's router weighs its choice by the softmax over all experts,
// not over the chosen ones: see reference.cpp). Identities, never recycled:
// the set's (the key) on every change of which adapters are in it, and a
// version of the scales, of the control vector and of warmup (read only by
// the fault switches that put them in the key).
class Adapters {
public:
    // Throws Error naming the use whose adapter is not of the model's shape,
    // a repeated adapter or a scale that is not finite; nothing changes.
    void set_loras(const ModelConfig& config, std::vector<LoraUse> uses);
    // nullopt clears. Throws Error naming a bad range or size; nothing changes.
    void set_cvec(const ModelConfig& config, std::optional<ControlVector> cvec);

    void set_warmup(bool on);

    std::span<const LoraUse> loras() const { return loras_; }
    bool warmup() const { return warmup_; }
    std::uint64_t warmup_version() const { return warmup_version_; }
    const ControlVector* cvec() const { return cvec_ ? &*cvec_ : nullptr; }
    bool empty() const { return loras_.empty() && !cvec_ && !warmup_; }
    AdapterSetId set_id() const { return set_id_; }
    std::uint64_t scales_version() const { return scales_version_; }
    std::uint64_t cvec_version() const { return cvec_version_; }

    static const Adapters& none();  // no adapter, no control vector

private:
    std::vector<LoraUse> loras_;
    std::optional<ControlVector> cvec_;
    AdapterSetId set_id_ = AdapterSetId::mint();
    std::uint64_t scales_version_ = 0, cvec_version_ = 0, warmup_version_ = 0;
    bool warmup_ = false;
};

// out[0..n_out) += factor * B (A x), summed in double: the reference's
// LoRA (the plan's uses its own kernels).
void lora_reference_add(float* out, const float* x, const LoraMatrix& m, int n_in, int n_out, float factor);

}  // namespace kvweld
