// Backend samplers per sequence (ABI 11): what a server attaches to a
// sequence so that the engine picks the next token itself, as part of the
// decode (llama.cpp's llama_set_sampler with a chain of greedy, or top-k
// then dist). A spec is greedy (top_k 0) or top-k followed by a seeded
// draw; a Sampler is a spec with its draw state, one draw per sampled row.
// kvweld's engines sample with it; the simulator judges any engine's
// sampled tokens with may_sample, which needs no draw: the token must be
// one the spec can give for the reference's logits.
#pragma once

#include "util/rng.hpp"

#include <cstdint>
#include <span>
#include <string>

namespace kvweld {

inline constexpr int kMaxTopK = 64;  // the widest top-k a spec may name

struct SamplerSpec {
    int top_k = 0;           // 0: greedy; 1..kMaxTopK: top-k, then a draw
    std::uint32_t seed = 0;  // the draw's seed (top-k only)
    bool operator==(const SamplerSpec&) const = default;
};
std::string describe(const SamplerSpec& s);  // "greedy", "top-k 4 seed 17"
// An Error naming a top_k outside 0..min(kMaxTopK, vocab).
void require_sampler(const SamplerSpec& s, int vocab);

class Sampler {
public:
    explicit Sampler(SamplerSpec spec) : spec_(spec), rng_(spec.seed) {}
    const SamplerSpec& spec() const { return spec_; }
    // Greedy: the largest logit (the lowest token among equals). Top-k: the
    // k largest, ordered by logit (then token), weighed by their softmax;
    // one uniform draw picks the first whose cumulative weight exceeds it.
    int sample(std::span<const float> logits);

private:
    SamplerSpec spec_;
    Rng rng_;  // the project's own PRNG: the same draws on every standard library
};

// Whether `token` is one `spec` may sample from logits that lie within
// `tolerance` (reference.hpp's logit_error) of `logits`: greedy, a token
// within tolerance of the largest; top-k, within tolerance of the k-th
// largest or above. Any draw is allowed: the draw is the engine's.
bool may_sample(const SamplerSpec& spec, std::span<const float> logits, int token, double tolerance);

}  // namespace kvweld
