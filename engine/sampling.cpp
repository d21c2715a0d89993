#include "engine/sampling.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace kvweld {

std::string describe(const SamplerSpec& s) {
    return s.top_k == 0 ? std::string("greedy") : cat("top-k ", s.top_k, " seed ", s.seed);
}

void require_sampler(const SamplerSpec& s, int vocab) {
    const int widest = std::min(kMaxTopK, vocab);
    require(s.top_k >= 0 && s.top_k <= widest, "sampler: top_k ", s.top_k, " out of range 0..", widest,
            " (0: greedy)");
}

namespace {

// The k largest logits' tokens, largest first (the lower token first among equals).
std::vector<int> top_tokens(std::span<const float> logits, int k) {
    k = std::min(k, int(logits.size()));
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    const auto before = [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    order.resize(std::size_t(k));
    return order;
}

}  // namespace

int Sampler::sample(std::span<const float> logits) {
    const std::vector<int> top = top_tokens(logits, std::max(1, spec_.top_k));
    if (spec_.top_k == 0) return top.front();
    const double u = rng_.unit();
    std::vector<double> weight(top.size());
    double total = 0.0;
    for (std::size_t i = 0; i < top.size(); ++i) total += weight[i] = std::exp(double(logits[top[i]] - logits[top[0]]));
    double cumulative = 0.0;
    for (std::size_t i = 0; i < top.size(); ++i)
        if ((cumulative += weight[i] / total) > u) return top[i];
    return top.back();  // u within rounding of 1
}

bool may_sample(const SamplerSpec& spec, std::span<const float> logits, int token, double tolerance) {
    if (token < 0 || std::size_t(token) >= logits.size()) return false;
    float scale = 1.0f;
    for (const float x : logits) scale = std::max(scale, std::fabs(x));
    const int kth = top_tokens(logits, std::max(1, spec.top_k)).back();
    return double(logits[std::size_t(token)]) >= double(logits[std::size_t(kth)]) - 2.0 * tolerance * scale;
}

}  // namespace kvweld
