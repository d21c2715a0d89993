#include "engine/cuda/cuda_plan.hpp"

#include "engine/cuda/device_kv.hpp"
#include "engine/cuda/device_pool.hpp"
#include "engine/faults.hpp"
#include "engine/packed_weights.hpp"

#include <algorithm>


namespace kvweld::cuda {

namespace {

std::size_t sz(int v) { return static_cast<std::size_t>(v); }

template <class T>
T* pinned(std::size_t count) {
    const auto lock = device_lock();
    void* p = nullptr;
    KVWELD_CUDA_CHECK(cudaMallocHost(&p, count * sizeof(T)));
    return static_cast<T*>(p);
}

}  // namespace

CudaPlan::CudaPlan(const Model& model, const KvCache& cache, Mode mode, const Adapters& adapters)
    : config_(model.config()), mode_(mode), loras_(adapters.loras().begin(), adapters.loras().end()) {
    const auto lock = device_lock();
    require_cache_fits(model, cache);
    require_device();
    key_ = key_of(model, cache, adapters);
    if (adapters.cvec()) cvec_at_build_ = *adapters.cvec();
    for (int l = 0; l < config_.n_layers; ++l) {
        kv_.push_back(cache.layer(l));
        bound_.push_back(device_kv(kv_.back()));
    }
    start(model);
}

CudaPlan::CudaPlan(const Model& model, const KvPool& pool, int position, Mode mode, const Adapters& adapters)
    : config_(model.config()), mode_(mode), loras_(adapters.loras().begin(), adapters.loras().end()) {
    const auto lock = device_lock();
    require(pool.n_layers() == config_.n_layers && pool.kv_dim() == config_.kv_dim(), "KV pool of ", pool.n_layers(),
            " layers, kv_dim ", pool.kv_dim(), " cannot serve a model of ", config_.n_layers, " layers, kv_dim ",
            config_.kv_dim());
    require_device();
    key_ = key_of(model, pool, position, adapters);
    if (adapters.cvec()) cvec_at_build_ = *adapters.cvec();
    paged_ = pool.storage();
    block_size_ = pool.block_size();
    const DevicePool& d = DevicePool::of(*paged_);
    for (int l = 0; l < config_.n_layers; ++l) bound_.push_back({d.key(l), d.value(l), d.n_blocks()});
    start(model);
}

void CudaPlan::start(const Model& model) {
    require(int(loras_.size()) <= kMaxCudaLoras, "backend=cuda: ", loras_.size(), " LoRA adapters in a set, the CUDA plan "
            "takes at most ", kMaxCudaLoras);
    weights_ = DeviceModel::of(model);
    allocate();
    cudaStream_t stream = nullptr;
    KVWELD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    stream_.reset(stream);
    if (mode_ == Mode::graph) capture();
}

CudaPlan::~CudaPlan() {
    // The handles (exec, graph, stream) are destroyed first, before any
    // buffer they point into; the device lock covers their destruction.
    const auto lock = device_lock();
    exec_.reset();
    graph_.reset();
    stream_.reset();
}

CudaPlan::Bound CudaPlan::device_kv(const KvLayer& layer) const {
    DeviceKv& d = DeviceKv::of(*layer);
    return {d.key(), d.value()};
}

void CudaPlan::allocate() {
    const ModelConfig& c = config_;
    const int rows = key_.max_seq_len;
    x_ = DeviceBuffer<float>(sz(c.dim));
    xb_ = DeviceBuffer<float>(sz(std::max(c.dim, c.q_dim())));
    qkv_ = DeviceBuffer<float>(sz(c.q_dim() + 2 * c.kv_dim()));
    att_ = DeviceBuffer<float>(sz(c.q_dim()));
    proj_ = DeviceBuffer<float>(sz(c.dim));
    h13_ = DeviceBuffer<float>(2 * sz(c.ffn_dim));
    scores_ = DeviceBuffer<float>(sz(c.n_heads) * sz(rows));
    logits_ = DeviceBuffer<float>(sz(c.vocab));
    const std::vector<float> table = rope_table(c, rows);
    rope_ = DeviceBuffer<float>(table.size());
    rope_.upload(table.data(), table.size());
    step_ = DeviceBuffer<StepData>(1);
    host_step_.reset(pinned<StepData>(1));
    host_logits_.reset(pinned<float>(sz(c.vocab)));
    upload_loras();
    cvec_ = DeviceBuffer<float>(sz(c.n_layers) * sz(c.dim));
    cvec_on_ = DeviceBuffer<int>(sz(c.n_layers));
    if (paged_) {  // room for a whole sequence; unused entries name no block (-1)
        const std::vector<int> none(sz(rows / block_size_ + 1), -1);
        table_ = DeviceBuffer<int>(none.size());
        table_.upload(none.data(), none.size());
        host_table_.reset(pinned<int>(none.size()));
    }
}

void CudaPlan::upload_loras() {
    int max_rank = 0;
    for (const LoraUse& u : loras_)
        for (int l = 0; l < config_.n_layers; ++l)
            for (int t = 0; t < kLoraTargets; ++t) {
                const LoraMatrix& m = u.adapter->matrix(l, LoraTarget(t));
                max_rank = std::max(max_rank, m.rank);
                lora_a_.emplace_back(m.a.size());
                lora_b_.emplace_back(m.b.size());
                if (m.rank == 0) continue;
                lora_a_.back().upload(m.a.data(), m.a.size());
                lora_b_.back().upload(m.b.data(), m.b.size());
            }
    lora_t_ = DeviceBuffer<float>(sz(max_rank));
}

void CudaPlan::record_loras(cudaStream_t s, LoraTarget t, int layer, const float* x, float* out) {
    const auto [n_out, n_in] = lora_shape(config_, t);
    for (std::size_t i = 0; i < loras_.size(); ++i) {
        const LoraMatrix& m = loras_[i].adapter->matrix(layer, t);
        if (m.rank == 0) continue;
        const std::size_t at = (i * sz(config_.n_layers) + sz(layer)) * kLoraTargets + sz(int(t));
        KVWELD_CUDA_CHECK(launch_matvec({lora_a_[at].get(), x, lora_t_.get(), m.rank, n_in}, s));
        KVWELD_CUDA_CHECK(
            launch_lora_add({lora_b_[at].get(), lora_t_.get(), out, step_.get(), int(i), n_out, m.rank}, s));
    }
}

// The decode step as kernel launches, in the CPU plan's op order. Only
// pointers and sizes are arguments; per-token data is read from step_.
void CudaPlan::record(cudaStream_t s) {
    const ModelConfig& c = config_;
    const int q_dim = c.q_dim(), kv_dim = c.kv_dim();
    const StepData* step = step_.get();
    float *x = x_.get(), *xb = xb_.get(), *qkv = qkv_.get(), *h13 = h13_.get();
    const int fixed_pos = fault_on(Fault::offset_not_rebound) ? key_.position : -1;
    const int fixed_len = fault_on(Fault::mask_not_rebound) ? key_.position + 1 : 0;
    const int* table = paged_ ? table_.get() : nullptr;

    KVWELD_CUDA_CHECK(launch_embed({weights_->embedding(), x, step, c.dim}, s));
    for (int l = 0; l < c.n_layers; ++l) {
        const DeviceLayer& w = weights_->layer(l);
        const Bound kv = bound_[sz(l)];
        KVWELD_CUDA_CHECK(launch_rmsnorm({x, w.att_norm, xb, c.dim, 1, c.norm_eps}, s));
        KVWELD_CUDA_CHECK(launch_matvec({w.wqkv, xb, qkv, q_dim + 2 * kv_dim, c.dim}, s));
        record_loras(s, LoraTarget::wq, l, xb, qkv);
        record_loras(s, LoraTarget::wv, l, xb, qkv + q_dim + kv_dim);
        if (c.family == Family::qwen3) {
            KVWELD_CUDA_CHECK(launch_rmsnorm({qkv, w.q_norm, qkv, c.head_dim, c.n_heads, c.norm_eps}, s));
            KVWELD_CUDA_CHECK(launch_rmsnorm({qkv + q_dim, w.k_norm, qkv + q_dim, c.head_dim, c.n_kv_heads, c.norm_eps}, s));
        }
        KVWELD_CUDA_CHECK(launch_rope({qkv, rope_.get(), step, c.n_heads, c.head_dim}, s));
        KVWELD_CUDA_CHECK(launch_rope({qkv + q_dim, rope_.get(), step, c.n_kv_heads, c.head_dim}, s));
        KVWELD_CUDA_CHECK(launch_kv_write({qkv + q_dim, qkv + q_dim + kv_dim, kv.k, kv.v, step, table, block_size_,
                                           kv.n_blocks, kv_dim, fixed_pos, l}, s));
        KVWELD_CUDA_CHECK(launch_attention({qkv, kv.k, kv.v, att_.get(), scores_.get(), step, table, block_size_,
                                            kv.n_blocks, c.n_heads, c.kv_group(),
                                            c.head_dim, kv_dim, key_.max_seq_len, fixed_len, l}, s));
        KVWELD_CUDA_CHECK(launch_matvec({w.wo, att_.get(), proj_.get(), c.dim, q_dim}, s));
        KVWELD_CUDA_CHECK(launch_add({x, proj_.get(), c.dim}, s));
        KVWELD_CUDA_CHECK(launch_rmsnorm({x, w.ffn_norm, xb, c.dim, 1, c.norm_eps}, s));
        KVWELD_CUDA_CHECK(launch_matvec({w.w13, xb, h13, 2 * c.ffn_dim, c.dim}, s));
        KVWELD_CUDA_CHECK(launch_swiglu({h13, h13 + c.ffn_dim, c.ffn_dim}, s));
        KVWELD_CUDA_CHECK(launch_matvec({w.w2, h13, proj_.get(), c.dim, c.ffn_dim}, s));
        record_loras(s, LoraTarget::w2, l, h13, proj_.get());
        KVWELD_CUDA_CHECK(launch_add({x, proj_.get(), c.dim}, s));
        if (l >= 1)  // layer 0 never has a control vector
            KVWELD_CUDA_CHECK(launch_cvec({x, cvec_.get() + sz(l) * sz(c.dim), cvec_on_.get(), l, c.dim}, s));
    }
    KVWELD_CUDA_CHECK(launch_rmsnorm({x, weights_->final_norm(), x, c.dim, 1, c.norm_eps}, s));
    KVWELD_CUDA_CHECK(launch_matvec({weights_->classifier(), x, logits_.get(), c.vocab, c.dim}, s));
}

void CudaPlan::capture() {
    KVWELD_CUDA_CHECK(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal));
    try {
        record(stream_.get());
    } catch (...) {
        cudaGraph_t partial = nullptr;
        cudaStreamEndCapture(stream_.get(), &partial);  // leave the stream usable
        GraphHandle drop(partial);
        cudaGetLastError();  // the failed capture must not fail this thread's next call
        throw;
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_.get(), &graph);
    graph_.reset(graph);
    if (ended != cudaSuccess) cudaGetLastError();  // clear it, then report it
    check(ended, "cudaStreamEndCapture(stream_, &graph)");
    find_kv_nodes();
    cudaGraphExec_t exec = nullptr;
    KVWELD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph_.get(), 0));
    exec_.reset(exec);
}

void CudaPlan::recapture() {
    const auto lock = device_lock();
    exec_.reset();
    graph_.reset();
    kv_nodes_.clear();
    capture();
}

void CudaPlan::fail_node_update(std::optional<std::size_t> k) {
    require(kFaultsCompiled, "fail_node_update needs a KVWELD_FAULTS build");
    failing_update_ = k ? std::optional(node_updates_ + *k) : std::nullopt;
}

// Finds the nodes whose parameters bake KV pointers: kv_write and
// attention, one of each per layer, recognized by their kernel function.
void CudaPlan::find_kv_nodes() {
    KVWELD_CUDA_CHECK(cudaGraphGetNodes(graph_.get(), nullptr, &node_count_));
    std::vector<cudaGraphNode_t> nodes(node_count_);
    KVWELD_CUDA_CHECK(cudaGraphGetNodes(graph_.get(), nodes.data(), &node_count_));
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type;
        KVWELD_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
        if (type != cudaGraphNodeTypeKernel) continue;
        cudaKernelNodeParams p{};
        KVWELD_CUDA_CHECK(cudaGraphKernelNodeGetParams(node, &p));
        KvNode kn{node, 0, false, {}, {}};
        if (p.func == kv_write_kernel()) {
            kn.write = *static_cast<const KvWriteArgs*>(p.kernelParams[0]);
            kn.layer = kn.write.layer;
        } else if (p.func == attention_kernel()) {
            kn.attention = true;
            kn.attend = *static_cast<const AttentionArgs*>(p.kernelParams[0]);
            kn.layer = kn.attend.layer;
        } else {
            continue;
        }
        kv_nodes_.push_back(kn);
    }
    require(kv_nodes_.size() == 2 * sz(config_.n_layers), "CUDA graph capture: found ", kv_nodes_.size(),
            " KV nodes, expected 2 per layer (", 2 * config_.n_layers, ")");
}

void CudaPlan::set_node_kv(const KvNode& n, Bound kv) {
    KvWriteArgs write = n.write;
    AttentionArgs attend = n.attend;
    void* args[1];
    if (n.attention) {
        attend.k_cache = kv.k;
        attend.v_cache = kv.v;
        attend.n_blocks = kv.n_blocks;
        args[0] = &attend;
    } else {
        write.k_cache = kv.k;
        write.v_cache = kv.v;
        write.n_blocks = kv.n_blocks;
        args[0] = &write;
    }
    cudaKernelNodeParams p{};
    KVWELD_CUDA_CHECK(cudaGraphKernelNodeGetParams(n.node, &p));  // grid, block, function
    p.kernelParams = args;
    p.extra = nullptr;
    const std::size_t update = node_updates_++;
    if (kFaultsCompiled && failing_update_ == update)
        throw Error(cat("cudaGraphExecKernelNodeSetParams: injected failure of node update ", update));
    KVWELD_CUDA_CHECK(cudaGraphExecKernelNodeSetParams(exec_.get(), n.node, &p));
}

void CudaPlan::rebind(std::span<const KvLayer> layers) {
    const auto lock = device_lock();
    require_rebind_compatible(layers, key_, config_.kv_dim());
    std::vector<Bound> next;
    for (const KvLayer& layer : layers) next.push_back(device_kv(layer));  // may allocate; plan untouched
    // The fault moves layer 0 only, leaving the rest welded to old buffers.
    const std::size_t moved = fault_on(Fault::partial_rebind) ? 1 : layers.size();
    move_nodes(next, moved);
    for (std::size_t l = 0; l < moved; ++l) kv_[l] = layers[l];
}

void CudaPlan::rebind_pool(const KvPool& pool) {
    const auto lock = device_lock();
    require(paged_ != nullptr, "rebind_pool: this plan reads a dense cache, not a KV pool");
    require(pool.block_size() == block_size_ && pool.n_layers() == config_.n_layers && pool.kv_dim() == config_.kv_dim(),
            "rebind_pool: a pool of block size ", pool.block_size(), " cannot replace the plan's ", block_size_,
            "; nothing rebound");
    const DevicePool& d = DevicePool::of(*pool.storage());  // may allocate; plan untouched
    std::vector<Bound> next;
    for (int l = 0; l < config_.n_layers; ++l) next.push_back({d.key(l), d.value(l), d.n_blocks()});
    move_nodes(next, next.size());
    paged_ = pool.storage();
}

// Points the first `moved` layers' nodes at `next`; on a failed node update
// the nodes already moved go back, and the error is reported.
void CudaPlan::move_nodes(const std::vector<Bound>& next, std::size_t moved) {
    std::size_t done = 0;
    try {
        for (; done < kv_nodes_.size(); ++done) {
            const KvNode& n = kv_nodes_[done];
            if (sz(n.layer) < moved) set_node_kv(n, next[sz(n.layer)]);
        }
    } catch (...) {
        restore_nodes(done, moved);  // all or nothing: put back what moved
        throw;
    }
    for (KvNode& n : kv_nodes_) {
        if (sz(n.layer) >= moved) continue;
        const Bound b = next[sz(n.layer)];
        n.write.k_cache = b.k;
        n.write.v_cache = b.v;
        n.write.n_blocks = b.n_blocks;
        n.attend.k_cache = b.k;
        n.attend.v_cache = b.v;
        n.attend.n_blocks = b.n_blocks;
    }
    for (std::size_t l = 0; l < moved; ++l) bound_[l] = next[l];
}

// Best effort after a failed rebind: the first `count` nodes go back to the
// buffers they were bound to. The original error is the one reported.
void CudaPlan::restore_nodes(std::size_t count, std::size_t moved) noexcept {
    cudaGetLastError();  // clear the error that stopped the rebind
    for (std::size_t i = 0; i < count; ++i) {
        const KvNode& n = kv_nodes_[i];
        if (sz(n.layer) >= moved) continue;
        try {
            set_node_kv(n, bound_[sz(n.layer)]);
        } catch (const Error&) {
        }
    }
}

std::vector<StorageSerial> CudaPlan::bound_serials() const {
    if (paged_) return std::vector<StorageSerial>(sz(config_.n_layers), paged_->serial());
    std::vector<StorageSerial> out;
    for (const KvLayer& l : kv_) out.push_back(l->serial());
    return out;
}

// run() waits for its stream, so x_ holds the last step's normed hidden state.
std::span<const float> CudaPlan::read_hidden() const {
    host_hidden_.resize(sz(config_.dim));
    x_.download(host_hidden_.data(), host_hidden_.size());
    return host_hidden_;
}

std::span<const float> CudaPlan::run(const StepParams& step) {
    const auto lock = device_lock();
    cudaStream_t s = stream_.get();
    const bool skip_write = fault_on(Fault::refeed_write_skipped) && step.pos < written_;
    *host_step_ = StepData{step.token, step.pos, step.mask_len, skip_write ? 0 : 1};
    for (std::size_t i = 0; i < loras_.size(); ++i) host_step_->lora_factor[i] = step_lora_factor(loras_, i, step);
    upload_cvec(step_cvec(cvec_at_build_, step));
    written_ = std::max(written_, step.pos + 1);
    KVWELD_CUDA_CHECK(cudaMemcpyAsync(step_.get(), host_step_.get(), sizeof(StepData), cudaMemcpyHostToDevice, s));
    if (paged_) upload_table(step.blocks);
    if (mode_ == Mode::graph)
        KVWELD_CUDA_CHECK(cudaGraphLaunch(exec_.get(), s));
    else
        record(s);
    KVWELD_CUDA_CHECK(cudaMemcpyAsync(host_logits_.get(), logits_.get(), sz(config_.vocab) * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
    KVWELD_CUDA_CHECK(cudaStreamSynchronize(s));
    return {host_logits_.get(), sz(config_.vocab)};
}

// The step's control vector into the fixed device buffers, when it is not
// the one they hold (no launch is in flight: run() waits for each).
void CudaPlan::upload_cvec(const ControlVector* cv) {
    const bool same = cv ? cvec_uploaded_ && *cvec_uploaded_ == *cv : !cvec_uploaded_;
    if (cvec_filled_ && same) return;
    const ModelConfig& c = config_;
    std::vector<int> on(sz(c.n_layers), 0);
    for (int l = 0; l < c.n_layers; ++l) on[sz(l)] = cv && cv->applies(l) ? 1 : 0;
    if (cv) cvec_.upload(cv->data.data(), std::min(cv->data.size(), cvec_.size()));
    cvec_on_.upload(on.data(), on.size());
    cvec_uploaded_ = cv ? std::optional<ControlVector>(*cv) : std::nullopt;
    cvec_filled_ = true;
}

// The step's block table into the fixed device buffer, on the plan's stream
// before the launch. The fault uploads only entries past those it sent
// before: the plan keeps reading the table it first ran with.
void CudaPlan::upload_table(std::span<const int> blocks) {
    require(!blocks.empty(), "paged plan: the step brings no block table");
    require(blocks.size() <= table_.size(), "paged plan: a table of ", blocks.size(), " blocks, the plan has room for ",
            table_.size());
    const std::size_t first = fault_on(Fault::stale_block_table) ? std::min(uploaded_, blocks.size()) : 0;
    uploaded_ = std::max(uploaded_, blocks.size());
    if (first == blocks.size()) return;
    std::copy(blocks.begin() + long(first), blocks.end(), host_table_.get() + first);
    KVWELD_CUDA_CHECK(cudaMemcpyAsync(table_.get() + first, host_table_.get() + first, (blocks.size() - first) * sizeof(int),
                                      cudaMemcpyHostToDevice, stream_.get()));
}

}  // namespace kvweld::cuda
