// The CUDA plan's kernels: argument structs (shared by host code and
// device code) and host-side launch functions. Every kernel takes one
// struct by value, so a captured graph node's parameters are that struct:
// the plan can read and rewrite them (rebind) after capture.
//
// Per-token data (token, position, mask length) is never a kernel argument:
// kernels read it from a fixed device StepData the host fills before each
// graph launch. KV, weight and scratch pointers are arguments: baked.
#pragma once

#include "engine/cuda_limits.hpp"

#include <cuda_runtime_api.h>

namespace kvweld::cuda {

struct StepData {
    int token;
    int pos;       // KV write offset and RoPE row
    int mask_len;  // attention length
    int write = 1; // 0: the KV write is skipped (the refeed_write_skipped fault)
    float lora_factor[kMaxCudaLoras] = {};  // each adapter's scale * alpha / rank, by its slot in the set
};

struct EmbedArgs {
    const float* table;  // [vocab][dim]
    float* x;
    const StepData* step;
    int dim;
};

// `groups` independent vectors of length n, contiguous (per-head norms use
// groups = heads); out may alias x.
struct RmsNormArgs {
    const float* x;
    const float* weight;  // [n], shared by the groups
    float* out;
    int n;
    int groups;
    float eps;
};

struct MatvecArgs {
    const float* w;  // [rows][cols], rows 16-byte aligned when cols % 4 == 0
    const float* x;
    float* out;
    int rows;
    int cols;
};

struct RopeArgs {
    float* vec;
    const float* table;  // [max_seq_len][head_dim]: cos, sin pairs
    const StepData* step;
    int n_heads;
    int head_dim;
};

// Dense KV (table == nullptr): position p is row p of k_cache / v_cache.
// Paged KV: k_cache / v_cache are this layer's region of the pool's
// storage ([n_blocks][block_size][kv_dim]) and position p is row
// p % block_size of block table[p / block_size]; the table is a fixed
// device buffer the host fills before each launch (per-step data), the
// pool pointers and n_blocks are baked (a grow updates them in the nodes).
struct KvWriteArgs {
    const float* k_src;
    const float* v_src;
    float* k_cache;  // baked: the welded storage
    float* v_cache;
    const StepData* step;
    const int* table;  // paged only
    int block_size;    // paged only
    int n_blocks;      // paged only: blocks in the welded storage
    int kv_dim;
    int fixed_pos;  // >= 0 only under the offset_not_rebound fault
    int layer;      // identifies the node for rebind
};

struct AttentionArgs {
    const float* q;
    const float* k_cache;  // baked: the welded storage
    const float* v_cache;
    float* out;
    float* scores;  // [n_heads][max_seq_len] scratch
    const StepData* step;
    const int* table;  // paged only, as in KvWriteArgs
    int block_size;
    int n_blocks;
    int n_heads;
    int kv_group;
    int head_dim;
    int kv_dim;
    int max_seq_len;
    int fixed_len;  // > 0 only under the mask_not_rebound fault
    int layer;      // identifies the node for rebind
};

struct SwigluArgs {
    float* gate;
    const float* up;
    int n;
};

struct AddArgs {
    float* x;
    const float* y;
    int n;
};

// A LoRA delta: out[j] += factor * sum_k b[j][k] t[k], with t = A x from a
// matvec before it and the factor read from step->lora_factor[slot] (the
// scale is step data; the adapters are baked).
struct LoraAddArgs {
    const float* b;  // [rows][rank]
    const float* t;  // [rank]
    float* out;
    const StepData* step;
    int slot;
    int rows;
    int rank;
};

// A control vector's row for one layer: x += vec where on[layer] != 0. The
// host fills vec and on before each launch (the vector is step data).
struct CvecArgs {
    float* x;
    const float* vec;  // this layer's row
    const int* on;     // [n_layers]
    int layer;
    int dim;
};

// Each launch returns cudaGetLastError() after queuing the kernel on `stream`.
cudaError_t launch_embed(const EmbedArgs& a, cudaStream_t stream);
cudaError_t launch_rmsnorm(const RmsNormArgs& a, cudaStream_t stream);
cudaError_t launch_matvec(const MatvecArgs& a, cudaStream_t stream);
cudaError_t launch_rope(const RopeArgs& a, cudaStream_t stream);
cudaError_t launch_kv_write(const KvWriteArgs& a, cudaStream_t stream);
cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t stream);
cudaError_t launch_swiglu(const SwigluArgs& a, cudaStream_t stream);
cudaError_t launch_add(const AddArgs& a, cudaStream_t stream);
cudaError_t launch_lora_add(const LoraAddArgs& a, cudaStream_t stream);
cudaError_t launch_cvec(const CvecArgs& a, cudaStream_t stream);

// The kernel functions, to recognize their nodes in a captured graph.
const void* kv_write_kernel();
const void* attention_kernel();

}  // namespace kvweld::cuda
