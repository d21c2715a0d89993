// The CPU plan's kernels: short, named for what they compute, written for
// speed (vectorized reductions, fused matrices). The reference forward in
// reference.cpp is their independent check.
#pragma once

namespace kvweld::cpu {

// out[r] = dot(w[r][0..cols), x) for r in [0, rows); w row-major.
void matvec(float* out, const float* w, const float* x, int rows, int cols);

// out = weight * x / rms(x); out may alias x.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);

// Rotates each head's pairs (2i, 2i+1) by the precomputed (cos, sin) row:
// rope_row[2i] = cos, rope_row[2i+1] = sin.
void rope(float* vec, int n_heads, int head_dim, const float* rope_row);

// Re-rotates each head's pairs (2i, 2i+1) of a key row that was rotated at
// some position p so that it is rotated at p + delta: the angle delta *
// theta^(-2i/head_dim) in double, rounded once (a context shift).
void rotate_by(float* vec, int n_heads, int head_dim, int delta, float theta);

// Single-query attention for one head over positions [0, len):
// out = softmax(q . k_t / sqrt(d)) . v_t, rows `stride` floats apart.
void attend(float* out, float* scores, const float* q, const float* k, const float* v, int len,
            int head_dim, int stride);

// The same over paged KV: position t's rows are row t % block_size of
// blocks k_blocks[t / block_size] and v_blocks[...], each row `stride`
// floats apart, the head's lanes `offset` floats into a row. With one block
// of len rows it computes what attend() does, bit for bit.
void attend_blocks(float* out, float* scores, const float* q, const float* const* k_blocks,
                   const float* const* v_blocks, int block_size, int offset, int len, int head_dim, int stride);

// gate = silu(gate) * up
void swiglu(float* gate, const float* up, int n);

// x += y
void add(float* x, const float* y, int n);

}  // namespace kvweld::cpu
