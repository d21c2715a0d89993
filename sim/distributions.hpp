// The traffic studies' random lengths and arrivals, from the run's own PRNG.
#pragma once

#include "util/rng.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>

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

// Heavy-tailed lengths, as serving traces show: log-normal with this mean
// (sigma the spread of the log), at least 1. Two draws (Box-Muller).
inline int lognormal(Rng& rng, double mean, double sigma) {
    const double u1 = std::max(rng.unit(), 1e-12), u2 = rng.unit();
    const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.141592653589793 * u2);
    const double mu = std::log(std::max(1.0, mean)) - sigma * sigma / 2.0;
    return std::max(1, int(std::lround(std::min(std::exp(mu + sigma * normal), 1e6))));
}

}  // namespace kvweld::sim
