// The sampler chain kvweld asks llama-server for on a sampled request, and
// where that chain's cut-offs fall on a distribution. Two servers whose
// logits differ by rounding draw the same token unless a cut-off lies
// within that rounding: then the kept set itself is not determined (a
// top-p sum 3e-7 under 0.95, seed 327), and what follows it diverges.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kvweld::sim::server {

// The chain, in llama.cpp's order, sent by name with every sampled request
// (so a change of the server's defaults cannot move it), then the draw.
struct SamplerChain {
    int top_k;
    double top_p, min_p;
};
inline constexpr SamplerChain kSamplerChain{40, 0.95, 0.05};

// Why the set of tokens the chain keeps from `logprobs` (a whole
// vocabulary's, (token, logprob) before sampling) is not determined when
// each logprob may move by `tolerance`: a top-p sum or a min-p ratio that
// close to its threshold. "" where every cut-off is clear of it.
std::string uncertain_cut(std::vector<std::pair<int, double>> logprobs, double tolerance);

}  // namespace kvweld::sim::server
