// The CUDA backend's plan: the whole decode step captured once as a CUDA
// graph, with the weight, scratch and KV pointers baked into its kernel
// nodes. Per-token data is copied into a fixed device StepData before each
// launch. Rebind rewrites the KV pointers of the kv_write and attention
// nodes in the executable graph (cudaGraphExecKernelNodeSetParams), all or
// nothing; anything else that changes means a new plan (re-capture).
//
// Paged KV: the same graph over a KV pool. The sequence's block table is
// per-step data in a fixed device buffer the host fills before each launch;
// the pool's storage pointers (and its block count) are baked into the
// kv_write and attention nodes, and a pool grow or reset rebinds them by the
// same node parameter update (rebind_pool), all or nothing.
#pragma once

#include "engine/cuda/device_buffer.hpp"
#include "engine/cuda/device_model.hpp"
#include "engine/cuda/kernels.cuh"
#include "engine/plan.hpp"

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace kvweld::cuda {

// Owning CUDA handles (the handle types are pointers to opaque structs).
struct StreamDeleter {
    void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct GraphDeleter {
    void operator()(cudaGraph_t g) const { cudaGraphDestroy(g); }
};
struct GraphExecDeleter {
    void operator()(cudaGraphExec_t e) const { cudaGraphExecDestroy(e); }
};
using StreamHandle = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
using GraphHandle = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDeleter>;
using GraphExecHandle = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

class CudaPlan final : public Plan {
public:
    enum class Mode {
        graph,   // the held plan: one graph launch per token
        stream,  // the same kernels launched one by one (measurement only)
    };
    // `adapters`: the LoRA adapter set the graph applies (baked: the set is
    // in the key; at most kMaxCudaLoras); their scales and the control
    // vector are step data, uploaded before each launch.
    CudaPlan(const Model& model, const KvCache& cache, Mode mode = Mode::graph,
             const Adapters& adapters = Adapters::none());
    CudaPlan(const Model& model, const KvPool& pool, int position, Mode mode = Mode::graph,
             const Adapters& adapters = Adapters::none());
    ~CudaPlan() override;
    CudaPlan(const CudaPlan&) = delete;
    CudaPlan& operator=(const CudaPlan&) = delete;

    void rebind(std::span<const KvLayer> layers) override;
    void rebind_pool(const KvPool& pool) override;
    std::span<const float> run(const StepParams& step) override;
    std::vector<StorageSerial> bound_serials() const override;

    std::size_t graph_nodes() const { return node_count_; }
    // Measurement: drops the graph and captures and instantiates it again
    // (what a plan without rebind would do on every allocation change).
    void recapture();
    // Test builds only (KVWELD_FAULTS): the k-th node parameter update from
    // now on fails, so a rebind's rollback runs; nullopt turns it off.
    void fail_node_update(std::optional<std::size_t> k);

private:
    struct Bound {
        float* k;
        float* v;
        int n_blocks = 0;  // paged: blocks in the bound storage
    };
    // A captured node that bakes a layer's KV pointers.
    struct KvNode {
        cudaGraphNode_t node;
        int layer;
        bool attention;
        KvWriteArgs write;
        AttentionArgs attend;
    };
    struct PinnedDeleter {
        void operator()(void* p) const {
            const auto lock = device_lock();
            cudaFreeHost(p);
        }
    };

    void start(const Model& model);  // weights, buffers, stream, capture
    void allocate();
    void upload_table(std::span<const int> blocks);
    void upload_loras();                        // the set's A and B matrices, once
    void upload_cvec(const ControlVector* cv);  // the step's vector, when it is not the one uploaded
    // out += each baked adapter's delta for matrix t of `layer` at x.
    void record_loras(cudaStream_t s, LoraTarget t, int layer, const float* x, float* out);
    void move_nodes(const std::vector<Bound>& next, std::size_t moved);  // all or nothing
    void record(cudaStream_t stream);  // queues the whole forward
    void capture();
    void find_kv_nodes();
    void set_node_kv(const KvNode& node, Bound kv);  // throws naming the call
    void restore_nodes(std::size_t count, std::size_t moved) noexcept;
    Bound device_kv(const KvLayer& layer) const;

    ModelConfig config_;
    Mode mode_;
    std::shared_ptr<const DeviceModel> weights_;  // pinned: the graph reads them
    std::vector<KvLayer> kv_;                     // pinned: the graph writes them (dense)
    std::shared_ptr<PoolStorage> paged_;          // pinned: the graph writes it (paged)
    int block_size_ = 0;
    int written_ = 0;  // positions this plan has written up to (the refeed_write_skipped fault)
    DeviceBuffer<int> table_;                     // paged: the step's block table
    std::unique_ptr<int, PinnedDeleter> host_table_;
    std::size_t uploaded_ = 0;                    // table entries uploaded (the stale_block_table fault)
    std::vector<Bound> bound_;
    DeviceBuffer<float> x_, xb_, qkv_, att_, proj_, h13_, scores_, logits_, rope_;
    DeviceBuffer<StepData> step_;
    std::vector<LoraUse> loras_;                  // the adapter set, as built
    std::optional<ControlVector> cvec_at_build_;  // read only under the cvec_baked fault
    std::vector<DeviceBuffer<float>> lora_a_, lora_b_;  // [adapter][layer][target]; empty where not adapted
    DeviceBuffer<float> lora_t_;                  // A x, the rank-sized scratch
    DeviceBuffer<float> cvec_;                    // [n_layers][dim]: the step's control vector
    DeviceBuffer<int> cvec_on_;                   // [n_layers]: whether a layer adds it
    std::optional<ControlVector> cvec_uploaded_;  // what cvec_ and cvec_on_ hold (none: all off)
    bool cvec_filled_ = false;                    // cvec_on_ holds something at all
    std::unique_ptr<StepData, PinnedDeleter> host_step_;
    std::unique_ptr<float, PinnedDeleter> host_logits_;
    std::span<const float> read_hidden() const override;  // x_, read back from the device
    mutable std::vector<float> host_hidden_;              // its copy of x_
    std::vector<KvNode> kv_nodes_;
    std::size_t node_count_ = 0;
    std::size_t node_updates_ = 0;                   // counts set_node_kv calls
    std::optional<std::size_t> failing_update_;      // test builds: this update fails
    // Each handle owns itself, so a constructor that throws half-way frees
    // what it made. Declared last, destroyed first (exec, graph, stream):
    // a graph never outlives the buffers its nodes point into.
    StreamHandle stream_;
    GraphHandle graph_;
    GraphExecHandle exec_;
};

}  // namespace kvweld::cuda
