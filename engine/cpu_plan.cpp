#include "engine/cpu_plan.hpp"

#include "util/cat.hpp"
#include "engine/cpu_kernels.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld {

namespace {

std::size_t sz(int v) { return static_cast<std::size_t>(v); }

}  // namespace

CpuPlan::CpuPlan(const Model& model, const KvCache& cache, int threads, const Adapters& adapters)
    : config_(model.config()) {
    require_cache_fits(model, cache);
    key_ = key_of(model, cache, adapters);
    for (int l = 0; l < config_.n_layers; ++l) kv_.push_back(cache.layer(l));
    prepare(model, threads, cache.geometry().max_seq_len, adapters);
}

CpuPlan::CpuPlan(const Model& model, const KvPool& pool, int position, int threads, const Adapters& adapters)
    : config_(model.config()) {
    require(pool.n_layers() == config_.n_layers && pool.kv_dim() == config_.kv_dim(), "KV pool of ", pool.n_layers(),
            " layers, kv_dim ", pool.kv_dim(), " cannot serve a model of ", config_.n_layers, " layers, kv_dim ",
            config_.kv_dim());
    key_ = key_of(model, pool, position, adapters);
    paged_ = pool.storage();
    block_size_ = pool.block_size();
    const std::size_t max_blocks = sz(config_.max_seq_len / block_size_ + 1);
    k_blocks_.resize(max_blocks);
    v_blocks_.resize(max_blocks);
    zero_block_.assign(sz(block_size_) * sz(config_.kv_dim()), 0.0f);
    prepare(model, threads, config_.max_seq_len, adapters);
}

void CpuPlan::prepare(const Model& model, int threads, int max_seq_len, const Adapters& adapters) {
    const ModelConfig& c = config_;
    loras_.assign(adapters.loras().begin(), adapters.loras().end());
    if (adapters.cvec()) cvec_at_build_ = *adapters.cvec();
    warmup_at_build_ = adapters.warmup();
    int max_rank = 0;
    for (const LoraUse& u : loras_) max_rank = std::max(max_rank, u.adapter->rank());
    lora_rank_.resize(sz(max_rank));
    lora_out_.resize(sz(std::max({c.q_dim(), c.kv_dim(), c.dim})));
    build_ops();
    weights_ = pack_weights(model);
    rope_ = rope_table(c, key_.max_seq_len);
    x_.resize(sz(c.dim));
    xb_.resize(sz(std::max(c.dim, c.q_dim())));
    qkv_.resize(sz(c.q_dim() + 2 * c.kv_dim()));
    att_.resize(sz(c.q_dim()));
    proj_.resize(sz(c.dim));
    h13_.resize(2 * sz(c.ffn_dim));
    router_.resize(sz(c.n_experts));
    route_.resize(sz(c.n_experts));
    expert_out_.resize(c.moe() ? sz(c.dim) : 0);
    logits_.resize(sz(c.vocab));
    max_seq_len_ = max_seq_len;
    set_threads(threads);
}

// A new pool of workers; every row is computed whole by one thread, so the
// logits stay bitwise the same for any count (session_test checks it).
void CpuPlan::set_threads(int threads) {
    require(threads >= 1 && threads <= 256, "threads = ", threads, ": must be in 1..256");
    if (threads == (pool_ ? pool_->size() : 1) && !scores_.empty()) return;
    pool_.reset();
    if (threads > 1) pool_ = std::make_unique<WorkerPool>(threads);
    scores_.assign(sz(max_seq_len_) * sz(threads), 0.0f);  // one row per thread
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
        if (!loras_.empty()) ops_.push_back({OpKind::lora_qv, l});
        if (config_.family == Family::qwen3) ops_.push_back({OpKind::qk_norm, l});
        ops_.push_back({OpKind::rope, l});
        ops_.push_back({OpKind::kv_write, l});
        ops_.push_back({OpKind::attention, l});
        ops_.push_back({OpKind::out_proj, l});
        ops_.push_back({OpKind::residual, l});
        ops_.push_back({OpKind::ffn_norm, l});
        if (config_.moe()) {
            ops_.push_back({OpKind::moe, l});  // no LoRA on experts (lora_adapts)
        } else {
            ops_.push_back({OpKind::gate_up, l});
            ops_.push_back({OpKind::swiglu, l});
            ops_.push_back({OpKind::down_proj, l});
            if (!loras_.empty()) ops_.push_back({OpKind::lora_down, l});
        }
        ops_.push_back({OpKind::residual, l});
        if (l >= 1) ops_.push_back({OpKind::cvec, l});  // layer 0 never has one
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

void CpuPlan::rebind_pool(const KvPool& pool) {
    require(paged_ != nullptr, "rebind_pool: this plan reads a dense cache, not a KV pool");
    require(pool.block_size() == block_size_ && pool.n_layers() == config_.n_layers && pool.kv_dim() == config_.kv_dim(),
            "rebind_pool: a pool of block size ", pool.block_size(), " cannot replace the plan's ", block_size_,
            "; nothing rebound");
    paged_ = pool.storage();
}

const float* CpuPlan::paged_keys(int layer, int block) {
    const float* rows = paged_->key_block(layer, block);
    return rows ? rows : zero_block_.data();
}

const float* CpuPlan::paged_values(int layer, int block) {
    const float* rows = paged_->value_block(layer, block);
    return rows ? rows : zero_block_.data();
}

// The step's table; under the fault, the one the plan first ran with
// (extended by the step's own entries past its end).
std::span<const int> CpuPlan::table_of(const StepParams& step) {
    if (!fault_on(Fault::stale_block_table)) return step.blocks;
    if (first_table_.empty()) first_table_.assign(step.blocks.begin(), step.blocks.end());
    for (std::size_t i = first_table_.size(); i < step.blocks.size(); ++i) first_table_.push_back(step.blocks[i]);
    return std::span<const int>(first_table_).first(step.blocks.size());
}

std::vector<StorageSerial> CpuPlan::bound_serials() const {
    if (paged_) return std::vector<StorageSerial>(sz(config_.n_layers), paged_->serial());
    std::vector<StorageSerial> out;
    for (const KvLayer& l : kv_) out.push_back(l->serial());
    return out;
}

std::span<const float> CpuPlan::run(const StepParams& step) {
    require(!paged_ || !step.blocks.empty(), "paged plan: the step brings no block table");
    if (fault_on(Fault::causal_baked) && !causal_at_first_run_) causal_at_first_run_ = true;
    const std::span<const int> table = paged_ ? table_of(step) : std::span<const int>{};
    for (const Op& op : ops_) exec(op, step, table);
    written_ = std::max(written_, step.pos + 1);
    return logits_;
}

// Not causal: the op list in segments, each starting at a layer's
// attention (the first at the embedding); every step runs a segment before
// any runs the next, so a layer's K/V rows of the whole span are written
// before any step attends in it. A step's state across a segment's end is
// its residual stream x_ and its query (in qkv_).
void CpuPlan::run_span(std::span<const StepParams> steps, bool causal, const StepRows& each) {
    if (fault_on(Fault::causal_baked)) {
        if (!causal_at_first_run_) causal_at_first_run_ = causal;
        causal = *causal_at_first_run_;
    }
    if (causal || steps.size() <= 1) return Plan::run_span(steps, true, each);
    for (const StepParams& s : steps) require(!paged_ || !s.blocks.empty(), "paged plan: a step brings no block table");
    const std::size_t n = steps.size();
    std::vector<std::vector<float>> x(n), qkv(n);
    for (std::size_t at = 0; at < ops_.size();) {
        std::size_t end = at + 1;
        while (end < ops_.size() && ops_[end].kind != OpKind::attention) ++end;
        for (std::size_t i = 0; i < n; ++i) {
            StepParams step = steps[i];
            step.mask_len = steps.back().mask_len;  // the whole span
            const std::span<const int> table = paged_ ? table_of(step) : std::span<const int>{};
            if (at > 0) {
                x_ = x[i];
                qkv_ = qkv[i];
            }
            for (std::size_t k = at; k < end; ++k) exec(ops_[k], step, table);
            if (end < ops_.size()) {
                x[i] = x_;
                qkv[i] = qkv_;
                continue;
            }
            written_ = std::max(written_, step.pos + 1);
            each(i, logits_);
        }
        at = end;
    }
}

void CpuPlan::attention(int layer, int mask_len, std::span<const int> table) {
    const ModelConfig& c = config_;
    const int hd = c.head_dim, kv_dim = c.kv_dim();
    // Where the rows are: one block of mask_len rows (dense), or the table's blocks.
    int block = std::max(mask_len, 1);
    if (paged_) {
        block = block_size_;
        // Entries past the table (only a faulty mask asks for them) read zeros.
        const int n = std::min((mask_len + block_size_ - 1) / block_size_, int(k_blocks_.size()));
        mask_len = std::min(mask_len, n * block_size_);
        for (int i = 0; i < n; ++i) {
            const bool in = sz(i) < table.size();
            k_blocks_[sz(i)] = in ? paged_keys(layer, table[sz(i)]) : zero_block_.data();
            v_blocks_[sz(i)] = in ? paged_values(layer, table[sz(i)]) : zero_block_.data();
        }
    } else {
        k_blocks_.assign(1, kv_[sz(layer)]->key_row(0));
        v_blocks_.assign(1, kv_[sz(layer)]->value_row(0));
    }
    const std::size_t scores = scores_.size() / sz(pool_ ? pool_->size() : 1);
    parallel(c.n_heads, 1, [&](int t, int lo, int hi) {
        for (int h = lo; h < hi; ++h) {
            const int kvh = h / c.kv_group();
            cpu::attend_blocks(&att_[sz(h * hd)], scores_.data() + sz(t) * scores, &qkv_[sz(h * hd)],
                               k_blocks_.data(), v_blocks_.data(), block, kvh * hd, mask_len, hd, kv_dim);
        }
    });
}

void CpuPlan::write_kv(int layer, int at, std::span<const int> table) {
    const int q_dim = config_.q_dim(), kv_dim = config_.kv_dim();
    float* k = nullptr;
    float* v = nullptr;
    if (paged_) {
        // A position past the table, or a block outside the welded storage,
        // takes no write (only a faulty offset or a stale plan gets there).
        const std::size_t i = sz(at / block_size_);
        if (i >= table.size()) return;
        float* kb = paged_->key_block(layer, table[i]);
        float* vb = paged_->value_block(layer, table[i]);
        if (!kb || !vb) return;
        k = kb + sz(at % block_size_) * sz(kv_dim);
        v = vb + sz(at % block_size_) * sz(kv_dim);
    } else {
        k = kv_[sz(layer)]->key_row(at);
        v = kv_[sz(layer)]->value_row(at);
    }
    std::copy_n(qkv_.data() + q_dim, kv_dim, k);
    std::copy_n(qkv_.data() + q_dim + kv_dim, kv_dim, v);
}

void CpuPlan::apply_loras(float* out, const float* x, LoraTarget t, int layer, const StepParams& step) {
    const auto [n_out, n_in] = lora_shape(config_, t);
    for (std::size_t i = 0; i < loras_.size(); ++i) {
        const LoraMatrix& m = loras_[i].adapter->matrix(layer, t);
        if (m.rank == 0) continue;
        cpu::matvec(lora_rank_.data(), m.a.data(), x, m.rank, n_in);
        cpu::matvec(lora_out_.data(), m.b.data(), lora_rank_.data(), n_out, m.rank);
        const float f = step_lora_factor(loras_, i, step);
        for (int j = 0; j < n_out; ++j) out[j] += f * lora_out_[sz(j)];
    }
}

bool CpuPlan::step_warmup(const StepParams& step) const {
    if (fault_on(Fault::warmup_baked)) return warmup_at_build_;
    return step.adapters && step.adapters->warmup();
}

void CpuPlan::moe(const PackedWeights::Layer& p, const StepParams& step) {
    const ModelConfig& c = config_;
    cpu::matvec(router_.data(), w(p.router), xb_.data(), c.n_experts, c.dim);
    std::vector<int>& order = route_;
    for (int e = 0; e < c.n_experts; ++e) order[sz(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return router_[sz(a)] > router_[sz(b)]; });
    const int weighed = step_warmup(step) ? c.n_experts : c.n_experts_used;
    const float top = router_[sz(order[0])];
    double denom = 0.0;
    for (int i = 0; i < weighed; ++i) denom += std::exp(double(router_[sz(order[sz(i)])]) - top);
    std::fill(proj_.begin(), proj_.end(), 0.0f);
    for (int i = 0; i < c.n_experts_used; ++i) {
        const int e = order[sz(i)];
        matvec(h13_.data(), p.w13 + sz(e) * p.w13_stride, xb_.data(), 2 * c.ffn_dim, c.dim);
        cpu::swiglu(h13_.data(), h13_.data() + c.ffn_dim, c.ffn_dim);
        matvec(expert_out_.data(), p.w2 + sz(e) * p.w2_stride, h13_.data(), c.dim, c.ffn_dim);
        const auto weight = static_cast<float>(std::exp(double(router_[sz(e)]) - top) / denom);
        for (int j = 0; j < c.dim; ++j) proj_[sz(j)] += weight * expert_out_[sz(j)];
    }
}

void CpuPlan::exec(const Op& op, const StepParams& step, std::span<const int> table) {
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
        case OpKind::kv_write:
            if (fault_on(Fault::refeed_write_skipped) && step.pos < written_) break;
            // The fault writes every token at the offset the plan was built at.
            write_kv(op.layer, fault_on(Fault::offset_not_rebound) ? key_.position : step.pos, table);
            break;
        case OpKind::attention:
            attention(op.layer, fault_on(Fault::mask_not_rebound) ? key_.position + 1 : step.mask_len, table);
            break;
        case OpKind::out_proj: matvec(proj_.data(), p->wo, att_.data(), c.dim, q_dim); break;
        case OpKind::residual: cpu::add(x_.data(), proj_.data(), c.dim); break;
        case OpKind::ffn_norm: cpu::rmsnorm(xb_.data(), x_.data(), w(p->ffn_norm), c.dim, c.norm_eps); break;
        case OpKind::gate_up: matvec(h13_.data(), p->w13, xb_.data(), 2 * c.ffn_dim, c.dim); break;
        case OpKind::swiglu: cpu::swiglu(h13_.data(), h13_.data() + c.ffn_dim, c.ffn_dim); break;
        case OpKind::down_proj: matvec(proj_.data(), p->w2, h13_.data(), c.dim, c.ffn_dim); break;
        case OpKind::final_norm: cpu::rmsnorm(x_.data(), x_.data(), w(weights_.final_norm), c.dim, c.norm_eps); break;
        case OpKind::classifier: matvec(logits_.data(), weights_.classifier, x_.data(), c.vocab, c.dim); break;
        case OpKind::lora_qv:
            apply_loras(qkv_.data(), xb_.data(), LoraTarget::wq, op.layer, step);
            apply_loras(qkv_.data() + q_dim + kv_dim, xb_.data(), LoraTarget::wv, op.layer, step);
            break;
        case OpKind::lora_down: apply_loras(proj_.data(), h13_.data(), LoraTarget::w2, op.layer, step); break;
        case OpKind::moe: moe(*p, step); break;
        case OpKind::cvec:
            if (const ControlVector* cv = step_cvec(cvec_at_build_, step); cv && cv->applies(op.layer))
                cpu::add(x_.data(), cv->row(op.layer, c.dim), c.dim);
            break;
    }
}

}  // namespace kvweld
