// The next token, chosen from the reference's logits (never the engine's):
// the greedy argmax, or a sample from the softmax with the run's own PRNG.
#pragma once

#include "util/rng.hpp"

#include <algorithm>
#include <cmath>
#include <span>

namespace kvweld::sim {

inline int choose_token(std::span<const float> logits, bool sampled, Rng& rng) {
    if (!sampled) return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const float max = *std::max_element(logits.begin(), logits.end());
    double total = 0.0;
    for (float l : logits) total += std::exp(double(l - max));
    double u = rng.unit() * total;
    for (std::size_t i = 0; i < logits.size(); ++i) {
        u -= std::exp(double(logits[i] - max));
        if (u <= 0.0) return static_cast<int>(i);
    }
    return static_cast<int>(logits.size()) - 1;
}

}  // namespace kvweld::sim
