// Short kernels, each named for what it computes. Each has a CPU check in
// engine/cuda/tests/kernels_test.cpp against engine/cpu_kernels.
#include "engine/cuda/kernels.cuh"

#include <cfloat>

namespace kvweld::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int n, int threads = kThreads) { return (n + threads - 1) / threads; }

__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

__device__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the block; every thread gets the result. blockDim.x % 32 == 0.
__device__ float block_sum(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    __syncthreads();  // partial may still be read by a previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    if (threadIdx.x == 0) partial[0] = v;
    __syncthreads();
    return partial[0];
}

__device__ float block_max(float v) {
    __shared__ float partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : -FLT_MAX;
    if (warp == 0) v = warp_max(v);
    if (threadIdx.x == 0) partial[0] = v;
    __syncthreads();
    return partial[0];
}

__global__ void embed_kernel(EmbedArgs a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.dim) a.x[i] = a.table[static_cast<size_t>(a.step->token) * a.dim + i];
}

// One block per group.
__global__ void rmsnorm_kernel(RmsNormArgs a) {
    const float* x = a.x + static_cast<size_t>(blockIdx.x) * a.n;
    float* out = a.out + static_cast<size_t>(blockIdx.x) * a.n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) ss += x[i] * x[i];
    const float scale = rsqrtf(block_sum(ss) / a.n + a.eps);
    for (int i = threadIdx.x; i < a.n; i += blockDim.x) out[i] = a.weight[i] * (scale * x[i]);
}

// One warp per row; float4 loads when the rows allow them.
__global__ void matvec_kernel(MatvecArgs a) {
    const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (row >= a.rows) return;
    const float* w = a.w + static_cast<size_t>(row) * a.cols;
    float sum = 0.0f;
    if (a.cols % 4 == 0 && reinterpret_cast<size_t>(w) % 16 == 0 && reinterpret_cast<size_t>(a.x) % 16 == 0) {
        const float4* w4 = reinterpret_cast<const float4*>(w);
        const float4* x4 = reinterpret_cast<const float4*>(a.x);
        for (int j = lane; j < a.cols / 4; j += 32) {
            const float4 wv = w4[j], xv = x4[j];
            sum += wv.x * xv.x + wv.y * xv.y + wv.z * xv.z + wv.w * xv.w;
        }
    } else {
        for (int j = lane; j < a.cols; j += 32) sum += w[j] * a.x[j];
    }
    sum = warp_sum(sum);
    if (lane == 0) a.out[row] = sum;
}

// One thread per rotated pair.
__global__ void rope_kernel(RopeArgs a) {
    const int pairs = a.head_dim / 2;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= a.n_heads * pairs) return;
    const int h = idx / pairs, i = (idx % pairs) * 2;
    const float* row = a.table + static_cast<size_t>(a.step->pos) * a.head_dim;
    const float c = row[i], s = row[i + 1];
    float* v = a.vec + h * a.head_dim + i;
    const float x0 = v[0], x1 = v[1];
    v[0] = x0 * c - x1 * s;
    v[1] = x0 * s + x1 * c;
}

// Where position t's row is (see KvWriteArgs): an offset in floats from
// the layer's base, or -1 when a paged table names a block outside the
// welded storage (only a stale plan's does): it reads as zeros and takes
// no write, as on the CPU.
__device__ long long kv_row(const int* table, int block_size, int n_blocks, int kv_dim, int t) {
    if (!table) return static_cast<long long>(t) * kv_dim;
    const int block = table[t / block_size];
    if (block < 0 || block >= n_blocks) return -1;
    return (static_cast<long long>(block) * block_size + t % block_size) * kv_dim;
}

__global__ void kv_write_kernel_impl(KvWriteArgs a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= a.kv_dim || !a.step->write) return;
    const int pos = a.fixed_pos >= 0 ? a.fixed_pos : a.step->pos;
    const long long row = kv_row(a.table, a.block_size, a.n_blocks, a.kv_dim, pos);
    if (row < 0) return;
    a.k_cache[row + i] = a.k_src[i];
    a.v_cache[row + i] = a.v_src[i];
}

// One block per query head: scores, softmax, weighted sum of V.
__global__ void attention_kernel_impl(AttentionArgs a) {
    const int h = blockIdx.x;
    const int kvh = h / a.kv_group;
    const int len = a.fixed_len > 0 ? a.fixed_len : a.step->mask_len;
    const float* q = a.q + h * a.head_dim;
    float* scores = a.scores + static_cast<size_t>(h) * a.max_seq_len;
    const float inv_sqrt_d = rsqrtf(static_cast<float>(a.head_dim));

    float local_max = -FLT_MAX;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        const long long row = kv_row(a.table, a.block_size, a.n_blocks, a.kv_dim, t);
        float s = 0.0f;
        if (row >= 0) {
            const float* k = a.k_cache + row + kvh * a.head_dim;
            for (int i = 0; i < a.head_dim; ++i) s += q[i] * k[i];
        }
        scores[t] = s * inv_sqrt_d;
        local_max = fmaxf(local_max, scores[t]);
    }
    const float max = block_max(local_max);
    float local_sum = 0.0f;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        scores[t] = expf(scores[t] - max);
        local_sum += scores[t];
    }
    const float sum = block_sum(local_sum);  // also orders the score writes before the reads below
    for (int i = threadIdx.x; i < a.head_dim; i += blockDim.x) {
        const float* v = a.v_cache + kvh * a.head_dim + i;
        float acc = 0.0f;
        for (int t = 0; t < len; ++t) {
            const long long row = kv_row(a.table, a.block_size, a.n_blocks, a.kv_dim, t);
            if (row >= 0) acc += scores[t] * v[row];
        }
        a.out[h * a.head_dim + i] = acc / sum;
    }
}

__global__ void swiglu_kernel(SwigluArgs a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) {
        const float g = a.gate[i];
        a.gate[i] = g / (1.0f + expf(-g)) * a.up[i];
    }
}

__global__ void add_kernel(AddArgs a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.n) a.x[i] += a.y[i];
}

// One thread per output row (a rank is small).
__global__ void lora_add_kernel(LoraAddArgs a) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= a.rows) return;
    const float* row = a.b + static_cast<size_t>(j) * a.rank;
    float sum = 0.0f;
    for (int k = 0; k < a.rank; ++k) sum += row[k] * a.t[k];
    a.out[j] += a.step->lora_factor[a.slot] * sum;
}

__global__ void cvec_kernel(CvecArgs a) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < a.dim && a.on[a.layer]) a.x[i] += a.vec[i];
}

}  // namespace

cudaError_t launch_embed(const EmbedArgs& a, cudaStream_t s) {
    embed_kernel<<<blocks_for(a.dim), kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_rmsnorm(const RmsNormArgs& a, cudaStream_t s) {
    rmsnorm_kernel<<<a.groups, kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_matvec(const MatvecArgs& a, cudaStream_t s) {
    matvec_kernel<<<blocks_for(a.rows * 32), kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_rope(const RopeArgs& a, cudaStream_t s) {
    rope_kernel<<<blocks_for(a.n_heads * a.head_dim / 2), kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_kv_write(const KvWriteArgs& a, cudaStream_t s) {
    kv_write_kernel_impl<<<blocks_for(a.kv_dim), kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_attention(const AttentionArgs& a, cudaStream_t s) {
    attention_kernel_impl<<<a.n_heads, 128, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_swiglu(const SwigluArgs& a, cudaStream_t s) {
    swiglu_kernel<<<blocks_for(a.n), kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_add(const AddArgs& a, cudaStream_t s) {
    add_kernel<<<blocks_for(a.n), kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_lora_add(const LoraAddArgs& a, cudaStream_t s) {
    lora_add_kernel<<<blocks_for(a.rows), kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

cudaError_t launch_cvec(const CvecArgs& a, cudaStream_t s) {
    cvec_kernel<<<blocks_for(a.dim), kThreads, 0, s>>>(a);
    return cudaGetLastError();
}

const void* kv_write_kernel() { return reinterpret_cast<const void*>(&kv_write_kernel_impl); }
const void* attention_kernel() { return reinterpret_cast<const void*>(&attention_kernel_impl); }

}  // namespace kvweld::cuda
