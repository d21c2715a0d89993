// The CPU backend's plan: an op list over plan-owned prepared weights
// (q/k/v and gate/up fused into single matrices), scratch buffers, a RoPE
// table, and the pinned KV storage it is welded to.
#pragma once

#include "engine/model.hpp"
#include "engine/packed_weights.hpp"
#include "engine/plan.hpp"
#include "engine/worker_pool.hpp"

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <atomic>
#include <memory>
#include <optional>
#include <vector>

namespace kvweld {

class CpuPlan final : public Plan {
public:
    // `adapters`: the LoRA adapter set the plan's ops apply (baked: the set
    // is in the key); their scales and the control vector come with each step.
    CpuPlan(const Model& model, const KvCache& cache, int threads = 1, const Adapters& adapters = Adapters::none());
    // A paged plan: welded to the pool's storage; each step brings the
    // sequence's block table.
    CpuPlan(const Model& model, const KvPool& pool, int position, int threads = 1,
            const Adapters& adapters = Adapters::none());

    void rebind(std::span<const KvLayer> layers) override;
    void rebind_pool(const KvPool& pool) override;
    std::span<const float> run(const StepParams& step) override;
    void run_span(std::span<const StepParams> steps, bool causal, const StepRows& each) override;
    std::vector<StorageSerial> bound_serials() const override;
    void set_threads(int threads) override;

    std::size_t op_count() const { return ops_.size(); }

private:
    enum class OpKind : std::uint8_t {
        embed, attn_norm, qkv, qk_norm, rope, kv_write, attention, out_proj, residual,
        ffn_norm, gate_up, swiglu, down_proj, final_norm, classifier,
        lora_qv, lora_down,  // the adapter set's deltas (only in a plan built with adapters)
        cvec,                // the step's control vector, after a layer (layers 1.. only)
        moe,                 // an MoE layer's feed-forward: route, then the chosen experts
    };
    struct Op {
        OpKind kind;
        int layer;
    };
    void prepare(const Model& model, int threads, int max_seq_len, const Adapters& adapters);
    // out += every baked adapter's delta for matrix `t` of `layer` at x.
    void apply_loras(float* out, const float* x, LoraTarget t, int layer, const StepParams& step);
    bool step_warmup(const StepParams& step) const;
    // proj_ = the routed experts' outputs at xb_, weighted (see reference.cpp's moe_ffn).
    void moe(const PackedWeights::Layer& p, const StepParams& step);
    void build_ops();
    std::span<const float> read_hidden() const override { return x_; }  // after the final norm
    // Paged: the K/V rows of block table entry `i` in `layer`, or a zero block
    // when the entry is outside the welded storage (what a stale plan reads).
    const float* paged_keys(int layer, int block);
    const float* paged_values(int layer, int block);
    std::span<const int> table_of(const StepParams& step);
    void exec(const Op& op, const StepParams& step, std::span<const int> table);
    void attention(int layer, int mask_len, std::span<const int> table);
    void write_kv(int layer, int at, std::span<const int> table);
    // Rows, or heads, split among the plan's threads in fixed blocks: each
    // row is computed by one thread the same way whatever the thread count.
    void matvec(float* out, std::size_t w_offset, const float* x, int rows, int cols);
    // fn(thread, first, end) over [0, items) in blocks of `granule`; a
    // direct call with one thread (no std::function on the hot path). Each
    // claim from a shared counter takes 1/(kShareDivisor * threads) of the
    // blocks still unclaimed (guided scheduling): a thread that starts late
    // (a worker waking up) takes fewer, and the last claims are small, so
    // neither thread waits long on the other at the region's end. Guided
    // over four equal chunks per thread: +2-3% tokens/s on two threads at
    // stories15M dims (decode_bench 'cpu/stories15m/held/t2', seven
    // alternating runs each way). Which thread computes a row never changes
    // the row's result.
    static constexpr int kShareDivisor = 2;
    template <class Fn>
    void parallel(int items, int granule, Fn&& fn) {
        if (!pool_) return fn(0, 0, items);
        const int blocks = (items + granule - 1) / granule, threads = pool_->size();
        std::atomic<int> next{0};
        pool_->run([&](int t) {
            int first = next.load(std::memory_order_relaxed);
            while (first < blocks) {
                const int take = std::max(1, (blocks - first) / (kShareDivisor * threads));
                if (!next.compare_exchange_weak(first, first + take, std::memory_order_relaxed)) continue;
                fn(t, granule * first, std::min(items, granule * (first + take)));
                first = next.load(std::memory_order_relaxed);
            }
        });
    }
    const float* w(std::size_t offset) const { return weights_.data.data() + offset; }

    ModelConfig config_;
    std::vector<Op> ops_;
    PackedWeights weights_;    // the plan's own copy: a model swap must be caught by the key
    std::vector<float> rope_;  // [max_seq_len][head_dim]: cos, sin pairs
    std::vector<KvLayer> kv_;  // the welded KV storage, pinned (dense)
    std::shared_ptr<PoolStorage> paged_;  // the welded pool storage, pinned (paged)
    int block_size_ = 0;
    int written_ = 0;  // positions this plan has written up to (the refeed_write_skipped fault)
    std::vector<int> first_table_;  // read only under the stale_block_table fault
    std::vector<const float*> k_blocks_, v_blocks_;  // one step's block rows, per layer
    std::vector<float> zero_block_;
    std::unique_ptr<WorkerPool> pool_;  // threads > 1 only
    int max_seq_len_ = 0;               // the rows of scores_ per thread
    std::vector<LoraUse> loras_;        // the adapter set, as built (scales: read only under lora_scale_baked)
    std::optional<ControlVector> cvec_at_build_;  // read only under the cvec_baked fault
    bool warmup_at_build_ = false;                // read only under the warmup_baked fault
    std::optional<bool> causal_at_first_run_;     // read only under the causal_baked fault
    std::vector<float> lora_rank_, lora_out_;     // LoRA scratch: A x, then B (A x)
    // scratch
    std::vector<float> x_, xb_, qkv_, att_, proj_, h13_, scores_, logits_;
    std::vector<float> router_, expert_out_;  // MoE: the router's logits, one expert's output
    std::vector<int> route_;                  // MoE: the experts, best first
};

}  // namespace kvweld
