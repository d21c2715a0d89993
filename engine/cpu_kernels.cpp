#include "engine/cpu_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace kvweld::cpu {

namespace {

float dot(const float* a, const float* b, int n) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

}  // namespace

void matvec(float* out, const float* w, const float* x, int rows, int cols) {
    const auto stride = static_cast<std::size_t>(cols);
    int r = 0;
    // Four rows per pass: each x element is loaded once for four products.
    for (; r + 4 <= rows; r += 4) {
        const float* w0 = w + r * stride;
        const float* w1 = w0 + stride;
        const float* w2 = w1 + stride;
        const float* w3 = w2 + stride;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int j = 0; j < cols; ++j) {
            s0 += w0[j] * x[j];
            s1 += w1[j] * x[j];
            s2 += w2[j] * x[j];
            s3 += w3[j] * x[j];
        }
        out[r] = s0;
        out[r + 1] = s1;
        out[r + 2] = s2;
        out[r + 3] = s3;
    }
    for (; r < rows; ++r) out[r] = dot(w + r * stride, x, cols);
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
    const float scale = 1.0f / std::sqrt(dot(x, x, n) / static_cast<float>(n) + eps);
    for (int i = 0; i < n; ++i) out[i] = weight[i] * (scale * x[i]);
}

void rope(float* vec, int n_heads, int head_dim, const float* rope_row) {
    for (int h = 0; h < n_heads; ++h) {
        float* v = vec + h * head_dim;
        for (int i = 0; i < head_dim; i += 2) {
            const float c = rope_row[i], s = rope_row[i + 1];
            const float a = v[i], b = v[i + 1];
            v[i] = a * c - b * s;
            v[i + 1] = a * s + b * c;
        }
    }
}

void attend(float* out, float* scores, const float* q, const float* k, const float* v, int len,
            int head_dim, int stride) {
    const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(head_dim));
    float max = -INFINITY;
    for (int t = 0; t < len; ++t) {
        scores[t] = dot(q, k + static_cast<std::size_t>(t) * stride, head_dim) * inv_sqrt_d;
        max = std::max(max, scores[t]);
    }
    float sum = 0.0f;
    for (int t = 0; t < len; ++t) {
        scores[t] = std::exp(scores[t] - max);
        sum += scores[t];
    }
    std::fill(out, out + head_dim, 0.0f);
    for (int t = 0; t < len; ++t) {
        const float a = scores[t] / sum;
        const float* vt = v + static_cast<std::size_t>(t) * stride;
#pragma omp simd
        for (int i = 0; i < head_dim; ++i) out[i] += a * vt[i];
    }
}

void swiglu(float* gate, const float* up, int n) {
    for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(float* x, const float* y, int n) {
#pragma omp simd
    for (int i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace kvweld::cpu
