// The traffic studies' random lengths and arrivals, from the run's own PRNG.
#pragma once

#include "engine/rng.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim {

// Knuth's method; fine for the small rates simulated here.
inline int poisson(Rng& rng, double mean) {
    const double limit = std::exp(-mean);
    int k = 0;
    for (double p = rng.unit(); p > limit; p *= rng.unit()) ++k;
    return k;
}

inline int geometric(Rng& rng, double mean) {
    const double p = 1.0 / std::max(1.0, mean);
    int k = 1;
    while (!rng.chance(p) && k < 1 << 16) ++k;
    return k;
}

}  // namespace kvweld::sim
