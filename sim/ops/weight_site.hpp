// What an op's weight rule (ops::<Kind>::weight, in sim/ops/<name>.cpp)
// may read: the seed's config as drawn so far, the engine's capabilities,
// and the random streams a weight is drawn from. sim_config.cpp weighs
// every kind in OpKind's order at two points of the seed's main stream, so
// that each seed draws exactly what it drew when the rules lived there:
//   - kinds before lora right after the first draws (admit and step draw
//     their ranges from the main stream there);
//   - lora and later once the rest of the config is drawn (lora and cvec
//     draw from the main stream, in that order; later kinds from streams
//     of their own, so that adding one changed no older seed).
#pragma once

#include "kvweld/engine_abi.h"
#include "sim/sim_config.hpp"
#include "util/rng.hpp"

#include <cstdint>

namespace kvweld::sim {

// The stream context shifts, state save and load, and steady phases share:
// three (weight, on) pairs in that order (see WeightSite::own).
inline constexpr std::uint64_t kStateStream = 0x73746174652d6f70ULL;

// A mixture of experts, where the engine loads one: a quarter of the seeds
// decode the "tiny" dims with experts instead of the model drawn, and most
// of those switch warmup. Drawn on a stream of its own, every draw made
// whatever is used, so that a reproduce command that names the model draws
// the same warmup weight.
struct MoeDraw {
    bool moe, warmup;
    int weight;
};
MoeDraw draw_moe(std::uint64_t seed);

struct WeightSite {
    const SimConfig& config;     // the seed, engine, model and shape; not the weights
    std::uint32_t capabilities;  // KVWELD_CAP_*: the engine's, or what both share with a peer
    bool white_box;              // an engine in process with no peer
    int first;                   // kinds before lora: the kind's first draw, 0 or 1..100 (0 for later kinds)
    Rng& main;                   // the seed's main stream at this kind's point (see above)

    bool has(std::uint32_t cap) const { return (capabilities & cap) != 0; }
    // The `index`-th (weight in lo..hi, on with probability p) pair of the
    // stream `tag`: its weight where on, else 0. Every pair before it is
    // drawn the same way, so the kinds that share a stream share a shape.
    int own(std::uint64_t tag, int index, int lo, int hi, double p) const {
        Rng rng(config.seed ^ tag);
        int w = 0;
        bool on = false;
        for (int i = 0; i <= index; ++i) {
            w = int(rng.range(lo, hi));
            on = rng.chance(p);
        }
        return on ? w : 0;
    }
};

}  // namespace kvweld::sim
