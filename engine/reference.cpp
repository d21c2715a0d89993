#include "engine/reference.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

namespace kvweld {

float round_to(KvType type, float x) {
    std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
    switch (type) {
        case KvType::f32: return x;
        case KvType::bf16:
            if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // inf, nan
            bits += 0x7fffu + ((bits >> 16) & 1u);
            return std::bit_cast<float>(bits & 0xffff0000u);
        case KvType::f16: {
            // Round to 10 mantissa bits at the f16 exponent: normals keep 13 fewer bits than f32; f16
            // subnormals (|x| < 2^-14) are multiples of 2^-24. Magnitudes past 65504 become inf.
            const float a = std::fabs(x);
            if (!(a < 65520.0f)) return std::isnan(x) ? x : std::copysign(std::numeric_limits<float>::infinity(), x);
            const float quantum = a < 0x1p-14f ? 0x1p-24f : std::ldexp(1.0f, std::ilogb(a) - 10);
            return std::copysign(std::nearbyint(a / quantum) * quantum, x);
        }
    }
    return x;
}

ReferenceKv::ReferenceKv(const ModelConfig& c, KvType t)
    : type(t),
      key(c.n_layers, std::vector<float>(static_cast<std::size_t>(c.max_seq_len) * c.kv_dim())),
      value(c.n_layers, std::vector<float>(static_cast<std::size_t>(c.max_seq_len) * c.kv_dim())),
      raw_key(value),
      routing_tie(static_cast<std::size_t>(c.max_seq_len), 0) {}

bool ReferenceKv::routing_tied(int up_to) const {
    const auto end = routing_tie.begin() + std::min<long>(long(up_to) + 1, long(routing_tie.size()));
    return std::find(routing_tie.begin(), end, std::uint8_t{1}) != end;
}

namespace {

// out[i] = sum_j w[i][j] * x[j]; w is [rows][cols] row-major. Summed in
// float as run.c does; the simd pragma lets the compiler vectorize (and so
// reorder) the sum: a different order from the plan's kernels, checked to
// agree within the tolerance. Norms and softmax below sum in double.
void matmul(float* out, const float* x, std::span<const float> w, int rows, int cols) {
    for (int i = 0; i < rows; i++) {
        const float* row = w.data() + static_cast<std::size_t>(i) * cols;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < cols; j++) sum += row[j] * x[j];
        out[i] = sum;
    }
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int j = 0; j < n; j++) ss += static_cast<double>(x[j]) * x[j];
    const double scale = 1.0 / std::sqrt(ss / n + eps);
    for (int j = 0; j < n; j++) out[j] = static_cast<float>(weight[j] * (scale * x[j]));
}

void softmax(float* x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = std::max(max, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = std::exp(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] = static_cast<float>(x[i] / sum);
}

// Rotates pairs (2i, 2i+1) of each head by pos * theta^(-2i/head_dim).
void rope(float* vec, int n_heads, int head_dim, int pos, float theta) {
    for (int h = 0; h < n_heads; h++) {
        for (int i = 0; i < head_dim; i += 2) {
            const double freq = 1.0 / std::pow(static_cast<double>(theta), double(i) / head_dim);
            const double angle = pos * freq;
            const double c = std::cos(angle), s = std::sin(angle);
            float* p = vec + h * head_dim + i;
            const double a = p[0], b = p[1];
            p[0] = static_cast<float>(a * c - b * s);
            p[1] = static_cast<float>(a * s + b * c);
        }
    }
}

}  // namespace

void ReferenceKv::shift(const ModelConfig& c, int p0, int p1, int len) {
    require(p0 >= 0 && p0 <= p1 && p1 <= len && len <= c.max_seq_len, "reference shift: [", p0, ", ", p1,
            ") of ", len, " positions");
    const auto row = std::size_t(c.kv_dim());
    for (int l = 0; l < c.n_layers; ++l)
        for (int from = p1, to = p0; from < len; ++from, ++to) {
            for (auto* m : {&raw_key[std::size_t(l)], &value[std::size_t(l)]})
                std::copy_n(m->begin() + long(std::size_t(from) * row), row, m->begin() + long(std::size_t(to) * row));
            float* k = key[std::size_t(l)].data() + std::size_t(to) * row;
            if (type == KvType::f32) {
                std::copy_n(raw_key[std::size_t(l)].data() + std::size_t(to) * row, row, k);
                rope(k, c.n_kv_heads, c.head_dim, to, c.rope_theta);
                continue;
            }
            // 16-bit rows: ggml's K-shift rotates the stored row by the distance moved and rounds it again.
            std::copy_n(key[std::size_t(l)].data() + std::size_t(from) * row, row, k);
            rope(k, c.n_kv_heads, c.head_dim, to - from, c.rope_theta);
            for (std::size_t i = 0; i < row; ++i) k[i] = round_to(type, k[i]);
        }
    for (int from = p1, to = p0; from < len; ++from, ++to) routing_tie[std::size_t(to)] = routing_tie[std::size_t(from)];
}

std::vector<double> log_probs(std::span<const float> logits) {
    const double top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - top);
    std::vector<double> out(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - top - std::log(sum);
    return out;
}

double logit_error(std::span<const float> got, std::span<const float> want) {
    require(got.size() == want.size(), "logit_error: ", got.size(), " logits against ", want.size());
    double worst = 0.0, scale = 1.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double d = std::fabs(double(got[i]) - double(want[i]));
        // A NaN would be dropped by std::max: a non-finite value is the worst error.
        if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
        worst = std::max(worst, d);
        scale = std::max(scale, std::fabs(double(want[i])));
    }
    return worst / scale;
}

namespace {

// W x's LoRA deltas: every adapter of the set that adapts this matrix.
void add_loras(float* out, const float* x, const Adapters& adapters, int layer, LoraTarget t, const ModelConfig& c) {
    const auto [n_out, n_in] = lora_shape(c, t);
    for (const LoraUse& u : adapters.loras())
        if (const LoraMatrix& m = u.adapter->matrix(layer, t); m.rank > 0)
            lora_reference_add(out, x, m, n_in, n_out, u.factor());
}

// One expert's feed-forward (the dense layer's is expert 0 of 1):
// out = w2(silu(w1 x) * w3 x); returns the hidden row w2 reads.
std::vector<float> expert_ffn(float* out, const float* x, const LayerWeights& w, int e, const ModelConfig& c) {
    const int n = c.experts_stored();
    std::vector<float> hb(c.ffn_dim), hb2(c.ffn_dim);
    matmul(hb.data(), x, LayerWeights::expert(w.w1, e, n), c.ffn_dim, c.dim);
    matmul(hb2.data(), x, LayerWeights::expert(w.w3, e, n), c.ffn_dim, c.dim);
    for (int i = 0; i < c.ffn_dim; i++) hb[i] = hb[i] / (1.0f + std::exp(-hb[i])) * hb2[i];
    matmul(out, hb.data(), LayerWeights::expert(w.w2, e, n), c.dim, c.ffn_dim);
    return hb;
}

// An MoE layer's feed-forward. The router's logits in double; the
// n_experts_used largest are chosen (a tie goes to the lower index) and
// weighted by the softmax over the chosen logits. Under warmup the weights
// are the softmax over all experts, still summing the n_used largest: what
// llama.cpp 0.3.36 computes (llama-graph.cpp build_moe_ffn: warmup selects
// all n_expert, normalizes over them, and sums the first n_expert_used;
// PR 14753), which kvweld's engine adopts so one reference judges both.
// Returns whether the choice was a tie (kRoutingTieMargin).
bool moe_ffn(float* out, const float* x, const LayerWeights& w, const ModelConfig& c, bool warmup) {
    std::vector<double> logit(c.n_experts);
    for (int e = 0; e < c.n_experts; e++) {
        double sum = 0.0;
        for (int j = 0; j < c.dim; j++) sum += double(w.router[std::size_t(e) * c.dim + j]) * x[j];
        logit[e] = sum;
    }
    std::vector<int> order(c.n_experts);
    for (int e = 0; e < c.n_experts; e++) order[e] = e;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logit[a] > logit[b]; });
    const int weighed = warmup ? c.n_experts : c.n_experts_used;  // the softmax's span
    double denom = 0.0;
    for (int i = 0; i < weighed; i++) denom += std::exp(logit[order[i]] - logit[order[0]]);
    std::fill(out, out + c.dim, 0.0f);
    std::vector<float> y(c.dim);
    for (int i = 0; i < c.n_experts_used; i++) {
        expert_ffn(y.data(), x, w, order[i], c);
        const double weight = std::exp(logit[order[i]] - logit[order[0]]) / denom;
        for (int j = 0; j < c.dim; j++) out[j] += static_cast<float>(weight * y[j]);
    }
    const int used = c.n_experts_used;
    return used < c.n_experts && logit[order[used - 1]] - logit[order[used]] < kRoutingTieMargin;
}

}  // namespace

namespace {

// One head's attention for q over positions [0, span) of layer l's rows.
void attend(float* out, const float* q, const ReferenceKv& kv, int l, int kvh, int span, const ModelConfig& c) {
    const int hd = c.head_dim, kv_dim = c.kv_dim();
    std::vector<float> att(span), qr(q, q + hd);
    for (float& x : qr) x = round_to(kv.type, x);
    for (int t = 0; t < span; t++) {
        const float* kt = kv.key[l].data() + t * kv_dim + kvh * hd;
        double score = 0.0;
#pragma omp simd reduction(+ : score)
        for (int i = 0; i < hd; i++) score += static_cast<double>(qr[i]) * kt[i];
        att[t] = static_cast<float>(score / std::sqrt(double(hd)));
    }
    softmax(att.data(), span);
    for (float& w : att) w = round_to(kv.type, w);
    for (int i = 0; i < hd; i++) {
        double sum = 0.0;
        for (int t = 0; t < span; t++) sum += static_cast<double>(att[t]) * kv.value[l][t * kv_dim + kvh * hd + i];
        out[i] = static_cast<float>(sum);
    }
}

// Token x's layer-l query, with its K and V written at `pos` (raw and rotated).
std::vector<float> query_and_kv(const std::vector<float>& x, ReferenceKv& kv, int l, int pos, const Model& model,
                                const Adapters& adapters) {
    const ModelConfig& c = model.config();
    const int dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hd = c.head_dim;
    const LayerWeights w = model.layer(l);
    float* k = kv.key[l].data() + pos * kv_dim;
    float* v = kv.value[l].data() + pos * kv_dim;
    std::vector<float> xb(dim), q(q_dim);
    rmsnorm(xb.data(), x.data(), w.att_norm.data(), dim, c.norm_eps);
    matmul(q.data(), xb.data(), w.wq, q_dim, dim);
    matmul(k, xb.data(), w.wk, kv_dim, dim);
    matmul(v, xb.data(), w.wv, kv_dim, dim);
    add_loras(q.data(), xb.data(), adapters, l, LoraTarget::wq, c);
    add_loras(v, xb.data(), adapters, l, LoraTarget::wv, c);
    if (c.family == Family::qwen3) {
        for (int h = 0; h < c.n_heads; h++) rmsnorm(&q[h * hd], &q[h * hd], w.q_norm.data(), hd, c.norm_eps);
        for (int h = 0; h < c.n_kv_heads; h++) rmsnorm(&k[h * hd], &k[h * hd], w.k_norm.data(), hd, c.norm_eps);
    }
    std::copy_n(k, kv_dim, kv.raw_key[l].data() + pos * kv_dim);
    rope(q.data(), c.n_heads, hd, pos, c.rope_theta);
    rope(k, c.n_kv_heads, hd, pos, c.rope_theta);
    for (int i = 0; i < kv_dim; ++i) k[i] = round_to(kv.type, k[i]), v[i] = round_to(kv.type, v[i]);
    return q;
}

// The rest of layer l for one token: attention over [0, span), the output
// projection, the feed-forward and the control vector, into x. Returns
// whether its routing was a tie.
bool finish_layer(std::vector<float>& x, const std::vector<float>& q, const ReferenceKv& kv, int l, int span,
                  const Model& model, const Adapters& adapters) {
    const ModelConfig& c = model.config();
    const int dim = c.dim, q_dim = c.q_dim(), hd = c.head_dim;
    const LayerWeights w = model.layer(l);
    std::vector<float> xb(std::max(dim, q_dim)), out(dim);
    for (int h = 0; h < c.n_heads; h++) attend(&xb[h * hd], &q[h * hd], kv, l, h / c.kv_group(), span, c);
    matmul(out.data(), xb.data(), w.wo, dim, q_dim);
    for (int i = 0; i < dim; i++) x[i] += out[i];

    rmsnorm(xb.data(), x.data(), w.ffn_norm.data(), dim, c.norm_eps);
    bool tie = false;
    if (c.moe()) {
        tie = moe_ffn(out.data(), xb.data(), w, c, adapters.warmup());
    } else {
        const std::vector<float> hidden = expert_ffn(out.data(), xb.data(), w, 0, c);
        add_loras(out.data(), hidden.data(), adapters, l, LoraTarget::w2, c);
    }
    for (int i = 0; i < dim; i++) x[i] += out[i];

    // control vector: added to the residual stream after the layer
    if (const ControlVector* cv = adapters.cvec(); cv && cv->applies(l))
        for (int i = 0; i < dim; i++) x[i] += cv->row(l, dim)[i];
    return tie;
}

}  // namespace

// Layer by layer: every token's K and V of a layer are written before any
// token's attention in it, so a token without the causal mask sees the
// whole span. With it, each token sees only up to its own position: the
// same numbers as one token at a time.
std::vector<std::vector<float>> reference_forward_span(const Model& model, ReferenceKv& kv,
                                                       std::span<const int> tokens, int first_pos,
                                                       const Adapters& adapters, bool causal,
                                                       std::vector<std::vector<float>>* hidden) {
    const ModelConfig& c = model.config();
    const int n = int(tokens.size()), dim = c.dim;
    require(n >= 1, "reference: an empty span of tokens");
    for (int token : tokens)
        require(token >= 0 && token < c.vocab, "reference: token ", token, " out of range: vocab_size is ", c.vocab);
    require(first_pos >= 0 && first_pos + n <= c.max_seq_len, "reference: positions ", first_pos, "..",
            first_pos + n - 1, " out of range: max_seq_len is ", c.max_seq_len);

    std::vector<std::vector<float>> x, q(n);
    std::vector<std::uint8_t> tie(std::size_t(n), 0);
    for (int token : tokens)
        x.emplace_back(model.embedding().begin() + token * dim, model.embedding().begin() + (token + 1) * dim);
    for (int l = 0; l < c.n_layers; l++) {
        for (int t = 0; t < n; t++) q[t] = query_and_kv(x[t], kv, l, first_pos + t, model, adapters);
        for (int t = 0; t < n; t++)
            tie[std::size_t(t)] |= std::uint8_t(
                finish_layer(x[t], q[t], kv, l, first_pos + (causal ? t : n - 1) + 1, model, adapters));
    }
    std::copy(tie.begin(), tie.end(), kv.routing_tie.begin() + first_pos);

    std::vector<std::vector<float>> logits;
    if (hidden) hidden->clear();
    for (int t = 0; t < n; t++) {
        rmsnorm(x[t].data(), x[t].data(), model.final_norm().data(), dim, c.norm_eps);
        if (hidden) hidden->push_back(x[t]);
        logits.emplace_back(c.vocab);
        matmul(logits.back().data(), x[t].data(), model.classifier(), c.vocab, dim);
    }
    return logits;
}

std::vector<float> reference_forward(const Model& model, ReferenceKv& kv, int token, int pos,
                                     const Adapters& adapters, std::vector<float>* hidden) {
    std::vector<std::vector<float>> hiddens;
    std::vector<std::vector<float>> logits =
        reference_forward_span(model, kv, std::span<const int>(&token, 1), pos, adapters, true,
                               hidden ? &hiddens : nullptr);
    if (hidden) *hidden = std::move(hiddens[0]);
    return std::move(logits[0]);
}

}  // namespace kvweld
