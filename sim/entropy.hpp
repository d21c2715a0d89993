// Where the op table's draws come from (each kind's, sim/ops/<name>.cpp): the swarm's
// seeded PRNG, or a fuzzer's input bytes (fuzz/ops_fuzzer.cpp), so that
// both generate ops with the one draw per kind. Every draw a seed makes
// goes through here in the same order as before the table, so a seed's
// ops did not change when the table came.
#pragma once

#include "util/rng.hpp"

#include <cstdint>
#include <optional>
#include <span>

namespace kvweld::sim {

class Entropy {
public:
    virtual ~Entropy() = default;
    virtual std::uint32_t pick() = 0;                // a choice among whatever is eligible when the op runs
    virtual std::uint64_t seed() = 0;                // a stream's seed
    virtual std::uint64_t below(std::uint64_t n) = 0;  // uniform in [0, n), n > 0
    virtual bool chance(double p) = 0;
    // Uniform integer in [lo, hi], lo <= hi.
    std::int64_t range(std::int64_t lo, std::int64_t hi) {
        return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
    }
    // An index drawn with the given weights (nullopt when all are 0).
    std::optional<int> weighted(std::span<const int> weights) {
        int total = 0;
        for (int w : weights) total += w;
        if (total == 0) return std::nullopt;
        auto u = static_cast<int>(below(static_cast<std::uint64_t>(total)));
        for (std::size_t k = 0; k < weights.size(); ++k) {
            if (u < weights[k]) return static_cast<int>(k);
            u -= weights[k];
        }
        return std::nullopt;
    }
};

// The swarm's: a seeded PRNG.
class RngEntropy final : public Entropy {
public:
    explicit RngEntropy(Rng& rng) : rng_(rng) {}
    std::uint32_t pick() override { return static_cast<std::uint32_t>(rng_.next() >> 32); }
    std::uint64_t seed() override { return rng_.next(); }
    std::uint64_t below(std::uint64_t n) override { return rng_.below(n); }
    bool chance(double p) override { return rng_.chance(p); }

private:
    Rng& rng_;
};

}  // namespace kvweld::sim
