// The weights a plan bakes, packed for a fast decode step: q/k/v fused into
// one [q+2kv][dim] matrix and gate/up into one [2ffn][dim] matrix, every
// tensor starting at a 64-byte (cache line) boundary of a 64-byte aligned
// buffer: with rows whose size is a multiple of 64 bytes, no vector load of
// a weight row straddles two cache lines. Both backends use this layout (the
// CUDA one uploads it as is). Also the RoPE table both backends read.
#pragma once

#include "engine/model.hpp"

#include <cstddef>
#include <new>
#include <vector>

namespace kvweld {

// Cache-line aligned storage for the packed weights.
template <class T>
struct CacheLineAllocator {
    using value_type = T;
    CacheLineAllocator() = default;
    template <class U>
    CacheLineAllocator(const CacheLineAllocator<U>&) {}
    T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
    void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{64}); }
    friend bool operator==(const CacheLineAllocator&, const CacheLineAllocator&) { return true; }
};

struct PackedWeights {
    struct Layer {
        std::size_t att_norm, wqkv, q_norm, k_norm, wo, ffn_norm, w13, w2;  // offsets into data
    };
    std::vector<float, CacheLineAllocator<float>> data;
    std::vector<Layer> layers;
    std::size_t embedding = 0, final_norm = 0, classifier = 0;
};

PackedWeights pack_weights(const Model& model);

// [rows][head_dim]: for each position, (cos, sin) of pos * theta^(-i/head_dim) per pair i.
std::vector<float> rope_table(const ModelConfig& config, int rows);

}  // namespace kvweld
