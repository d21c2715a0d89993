// The project's own PRNG and distributions. std:: distributions differ
// between standard libraries, so nothing that must replay uses them.
// splitmix64 seeds xoshiro256**.
#pragma once

#include <cstdint>

namespace kvweld {

inline std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

class Rng {
public:
    explicit Rng(std::uint64_t seed) {
        for (auto& word : s_) word = splitmix64(seed);
    }

    std::uint64_t next() {
        const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const std::uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    // Uniform in [0, n), n > 0. Lemire's multiply-shift with rejection.
    std::uint64_t below(std::uint64_t n) {
        for (;;) {
            const unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
            const auto low = static_cast<std::uint64_t>(m);
            if (low >= n || low >= (-n) % n) return static_cast<std::uint64_t>(m >> 64);
        }
    }

    // Uniform integer in [lo, hi], lo <= hi.
    std::int64_t range(std::int64_t lo, std::int64_t hi) {
        return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
    }

    // Uniform double in [0, 1) from the top 53 bits.
    double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

    bool chance(double p) { return unit() < p; }

    // Uniform float in [-a, a).
    float symmetric(float a) { return static_cast<float>((unit() * 2.0 - 1.0) * a); }

private:
    static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    std::uint64_t s_[4];
};

}  // namespace kvweld
