// A sequence's KV state as bytes: what kvweld's engine exports (a server's
// slot save, or an idle conversation offloaded to host memory or disk) and
// imports into a sequence, in this process or another.
//
// Layout (little-endian): "KVWS", u32 version (1), u64 the model's weight
// digest, u32 n_layers, u32 kv_dim, u32 dtype, u32 length, then per layer
// `length` key rows and `length` value rows of kv_dim f32 each. Keys are
// stored as rotated for their positions, every owed shift rotation applied.
#pragma once

#include "engine/kv_cache.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace kvweld {

inline constexpr std::size_t kKvStateHeaderBytes = 32;

// The cache must be settled (KvCache::settle): the bytes hold its rows as plans read them.
std::vector<std::uint8_t> export_kv_state(const KvCache& cache, std::uint64_t model_digest);

// Checks every field against `model_digest` and the cache's geometry, the
// length against its capacity, the size against the length and every value
// for finiteness, before it writes anything: a refused state is an Error
// naming the field, the value and the limit, and the cache is untouched.
// Accepted, the rows replace the cache's content in its own storage (same
// id: a plan held on it stays valid).
void import_kv_state(KvCache& cache, std::span<const std::uint8_t> bytes, std::uint64_t model_digest);

}  // namespace kvweld
