// The weights a plan bakes, packed for a fast decode step: q/k/v fused into
// one [q+2kv][dim] matrix and gate/up into one [2ffn][dim] matrix, every
// tensor starting at a 64-byte (cache line) boundary of one buffer in weight
// memory (engine/weight_memory.hpp: aligned, in huge pages): with rows whose
// size is a multiple of 64 bytes, no vector load of a weight row straddles
// two cache lines. Both backends use this layout (the CUDA one uploads it as
// is). Also the RoPE table both backends read.
#pragma once

#include "engine/model.hpp"
#include "engine/weight_memory.hpp"

#include <cstddef>
#include <vector>

namespace kvweld {

struct PackedWeights {
    struct Layer {
        std::size_t att_norm, wqkv, q_norm, k_norm, wo, ffn_norm, w13, w2;  // offsets into data
        // MoE: expert e's w13 is at w13 + e * w13_stride (w2 likewise); the router's [n_experts][dim].
        std::size_t w13_stride = 0, w2_stride = 0, router = 0;
    };
    std::vector<float, WeightAllocator<float>> data;
    std::vector<Layer> layers;
    std::size_t embedding = 0, final_norm = 0, classifier = 0;
};

PackedWeights pack_weights(const Model& model);

// [rows][head_dim]: for each position, (cos, sin) of pos * theta^(-i/head_dim) per pair i.
std::vector<float> rope_table(const ModelConfig& config, int rows);

}  // namespace kvweld
