// Where llama.cpp's top-k (the k best), top-p and min-p samplers cut a distribution
// (src/llama-sampler.cpp: top-p sums the top-k's renormalized
// probabilities in order until the sum reaches p; min-p keeps a token
// whose logit is within log(p) of the best one), and whether a rounding of
// `tolerance` could move a cut (sim/server/sampler_cut.hpp).
#include "sim/server/sampler_cut.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim::server {

namespace {

// The top-p cut: a logprob moved by t scales a probability by e^t, so a
// sum moves by at most its value times (e^t - 1) relative to the rest.
std::string top_p_cut(const std::vector<std::pair<int, double>>& top, double tolerance, std::size_t& kept) {
    const double best = top.front().second;
    double total = 0;
    for (const auto& [id, lp] : top) total += std::exp(lp - best);
    const double slack = 2 * std::expm1(tolerance);
    double sum = 0;
    kept = top.size();
    for (std::size_t i = 0; i + 1 < top.size(); ++i) {
        sum += std::exp(top[i].second - best) / total;
        if (std::fabs(sum - kSamplerChain.top_p) <= slack)
            return cat("top-p: the first ", i + 1, " tokens of the top ", top.size(), " hold ", sum, ", within ", slack,
                       " of ", kSamplerChain.top_p);
        if (sum >= kSamplerChain.top_p) {
            kept = i + 1;
            break;
        }
    }
    return "";
}

// The min-p cut over the tokens top-p kept: a difference of two logprobs
// moves by at most twice the tolerance.
std::string min_p_cut(const std::vector<std::pair<int, double>>& top, std::size_t kept, double tolerance) {
    const double floor = std::log(kSamplerChain.min_p);
    for (std::size_t i = 1; i < kept; ++i) {
        const double gap = top[i].second - top.front().second;
        if (std::fabs(gap - floor) <= 2 * tolerance)
            return cat("min-p: token ", top[i].first, " sits ", gap, " under the best, within ", 2 * tolerance, " of log ",
                       kSamplerChain.min_p);
    }
    return "";
}

}  // namespace

std::string uncertain_cut(std::vector<std::pair<int, double>> logprobs, double tolerance) {
    require(!logprobs.empty(), "uncertain_cut: no logprobs");
    std::stable_sort(logprobs.begin(), logprobs.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    const std::size_t k = std::size_t(kSamplerChain.top_k);
    if (logprobs.size() > k) {
        // Which of two near-equal tokens is the k-th is not determined either.
        const double gap = logprobs[k - 1].second - logprobs[k].second;
        if (gap <= 2 * tolerance)
            return cat("top-k: tokens ", logprobs[k - 1].first, " and ", logprobs[k].first, " around the cut at ", k,
                       " are ", gap, " apart, within ", 2 * tolerance);
        logprobs.resize(k);
    }
    std::size_t kept = 0;
    if (std::string why = top_p_cut(logprobs, tolerance, kept); !why.empty()) return why;
    return min_p_cut(logprobs, kept, tolerance);
}

}  // namespace kvweld::sim::server
