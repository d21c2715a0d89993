#include "engine/cpu_plan.hpp"

#include "engine/cat.hpp"
#include "engine/cpu_kernels.hpp"
#include "engine/error.hpp"
#include "engine/faults.hpp"

#include <cmath>

namespace kvweld {

namespace {

std::size_t sz(int v) { return static_cast<std::size_t>(v); }

}  // namespace

CpuPlan::CpuPlan(const Model& model, const KvCache& cache, int threads) : config_(model.config()) {
    require_cache_fits(model, cache);
    const ModelConfig& c = config_;
    key_ = key_of(model, cache);
    build_ops();
    weights_ = pack_weights(model);
    rope_ = rope_table(c, key_.max_seq_len);
    for (int l = 0; l < c.n_layers; ++l) kv_.push_back(cache.layer(l));
    x_.resize(sz(c.dim));
    xb_.resize(sz(std::max(c.dim, c.q_dim())));
    qkv_.resize(sz(c.q_dim() + 2 * c.kv_dim()));
    att_.resize(sz(c.q_dim()));
    proj_.resize(sz(c.dim));
    h13_.resize(2 * sz(c.ffn_dim));
    logits_.resize(sz(c.vocab));
    if (threads > 1) pool_ = std::make_unique<WorkerPool>(threads);
    scores_.resize(sz(cache.geometry().max_seq_len) * sz(threads));  // one row per thread
}

// Blocks of four rows, the kernel's own grouping, so a row never changes
// between the kernel's four-row and one-row paths with the thread count.
void CpuPlan::matvec(float* out, std::size_t w_offset, const float* x, int rows, int cols) {
    parallel(rows, 4, [&](int, int lo, int hi) {
        cpu::matvec(out + lo, w(w_offset) + sz(lo) * sz(cols), x, hi - lo, cols);
    });
}

void CpuPlan::build_ops() {
    ops_.push_back({OpKind::embed, -1});
    for (int l = 0; l < config_.n_layers; ++l) {
        ops_.push_back({OpKind::attn_norm, l});
        ops_.push_back({OpKind::qkv, l});
        if (config_.family == Family::qwen3) ops_.push_back({OpKind::qk_norm, l});
        ops_.push_back({OpKind::rope, l});
        ops_.push_back({OpKind::kv_write, l});
        ops_.push_back({OpKind::attention, l});
        ops_.push_back({OpKind::out_proj, l});
        ops_.push_back({OpKind::residual, l});
        ops_.push_back({OpKind::ffn_norm, l});
        ops_.push_back({OpKind::gate_up, l});
        ops_.push_back({OpKind::swiglu, l});
        ops_.push_back({OpKind::down_proj, l});
        ops_.push_back({OpKind::residual, l});
    }
    ops_.push_back({OpKind::final_norm, -1});
    ops_.push_back({OpKind::classifier, -1});
}

void CpuPlan::rebind(std::span<const KvLayer> layers) {
    require_rebind_compatible(layers, key_, config_.kv_dim());
    // The fault moves layer 0 only, leaving the rest welded to old buffers.
    const std::size_t moved = fault_on(Fault::partial_rebind) ? 1 : layers.size();
    for (std::size_t l = 0; l < moved; ++l) kv_[l] = layers[l];
}

std::vector<StorageSerial> CpuPlan::bound_serials() const {
    std::vector<StorageSerial> out;
    for (const KvLayer& l : kv_) out.push_back(l->serial());
    return out;
}

std::span<const float> CpuPlan::run(const StepParams& step) {
    for (const Op& op : ops_) exec(op, step);
    return logits_;
}

void CpuPlan::attention(int layer, int mask_len) {
    const ModelConfig& c = config_;
    const int hd = c.head_dim, kv_dim = c.kv_dim();
    const KvStorage& kv = *kv_[sz(layer)];
    const std::size_t scores = scores_.size() / sz(pool_ ? pool_->size() : 1);
    parallel(c.n_heads, 1, [&](int t, int lo, int hi) {
        for (int h = lo; h < hi; ++h) {
            const int kvh = h / c.kv_group();
            cpu::attend(&att_[sz(h * hd)], scores_.data() + sz(t) * scores, &qkv_[sz(h * hd)],
                        kv.key_row(0) + kvh * hd, kv.value_row(0) + kvh * hd, mask_len, hd, kv_dim);
        }
    });
}

void CpuPlan::exec(const Op& op, const StepParams& step) {
    const ModelConfig& c = config_;
    const int q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
    const PackedWeights::Layer* p = op.layer >= 0 ? &weights_.layers[sz(op.layer)] : nullptr;
    switch (op.kind) {
        case OpKind::embed:
            std::copy_n(w(weights_.embedding) + sz(step.token) * sz(c.dim), c.dim, x_.data());
            break;
        case OpKind::attn_norm: cpu::rmsnorm(xb_.data(), x_.data(), w(p->att_norm), c.dim, c.norm_eps); break;
        case OpKind::qkv: matvec(qkv_.data(), p->wqkv, xb_.data(), q_dim + 2 * kv_dim, c.dim); break;
        case OpKind::qk_norm:
            for (int h = 0; h < c.n_heads; ++h)
                cpu::rmsnorm(&qkv_[sz(h * hd)], &qkv_[sz(h * hd)], w(p->q_norm), hd, c.norm_eps);
            for (int h = 0; h < c.n_kv_heads; ++h)
                cpu::rmsnorm(&qkv_[sz(q_dim + h * hd)], &qkv_[sz(q_dim + h * hd)], w(p->k_norm), hd,
                             c.norm_eps);
            break;
        case OpKind::rope: {
            const float* row = &rope_[sz(step.pos) * sz(hd)];
            cpu::rope(qkv_.data(), c.n_heads, hd, row);
            cpu::rope(qkv_.data() + q_dim, c.n_kv_heads, hd, row);
            break;
        }
        case OpKind::kv_write: {
            // The fault writes every token at the offset the plan was built at.
            const int at = fault_on(Fault::offset_not_rebound) ? key_.position : step.pos;
            KvStorage& kv = *kv_[sz(op.layer)];
            std::copy_n(qkv_.data() + q_dim, kv_dim, kv.key_row(at));
            std::copy_n(qkv_.data() + q_dim + kv_dim, kv_dim, kv.value_row(at));
            break;
        }
        case OpKind::attention:
            attention(op.layer,
                      fault_on(Fault::mask_not_rebound) ? key_.position + 1 : step.mask_len);
            break;
        case OpKind::out_proj: matvec(proj_.data(), p->wo, att_.data(), c.dim, q_dim); break;
        case OpKind::residual: cpu::add(x_.data(), proj_.data(), c.dim); break;
        case OpKind::ffn_norm: cpu::rmsnorm(xb_.data(), x_.data(), w(p->ffn_norm), c.dim, c.norm_eps); break;
        case OpKind::gate_up: matvec(h13_.data(), p->w13, xb_.data(), 2 * c.ffn_dim, c.dim); break;
        case OpKind::swiglu: cpu::swiglu(h13_.data(), h13_.data() + c.ffn_dim, c.ffn_dim); break;
        case OpKind::down_proj: matvec(proj_.data(), p->w2, h13_.data(), c.dim, c.ffn_dim); break;
        case OpKind::final_norm: cpu::rmsnorm(x_.data(), x_.data(), w(weights_.final_norm), c.dim, c.norm_eps); break;
        case OpKind::classifier: matvec(logits_.data(), weights_.classifier, x_.data(), c.vocab, c.dim); break;
    }
}

}  // namespace kvweld
