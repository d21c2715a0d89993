// A plan's validity key and the check that compares a held key with the
// (model, cache) pair it is handed now.
//
//   Valid              nothing differs: reuse the plan
//   AllocationChanged  only the KV allocation differs: rebind or rebuild
//   Stale{reason}      something the plan baked differs: rebuild (a BuildReason
//                      from model_instance on)
#pragma once

#include "engine/config.hpp"
#include "engine/ids.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace kvweld {

class Model;
class KvCache;
class KvPool;
class Adapters;

// Why a plan was built: one table for both questions. A stale key names
// what it baked that differs (model_instance .. adapters); a session's
// build counters add the three reasons no key comparison gives (initial,
// replan, allocation_changed).
enum class BuildReason : std::uint8_t {
    initial,             // no plan held yet
    replan,              // replan-every-token mode
    allocation_changed,  // rebuild policy, or rebind refused
    model_instance,
    family,
    geometry,
    dtype,
    max_seq_len,
    n_layers,
    adapters,  // another LoRA adapter set (engine/adapters.hpp)
};
inline constexpr int kBuildReasons = 10;
std::string_view to_string(BuildReason r);

struct Validity {
    enum class Kind : std::uint8_t { valid, allocation_changed, stale };
    Kind kind = Kind::valid;
    BuildReason reason = BuildReason::model_instance;  // meaningful when stale

    static Validity valid() { return {}; }
    static Validity allocation_changed() { return {Kind::allocation_changed, {}}; }
    static Validity stale(BuildReason r) { return {Kind::stale, r}; }
    std::string describe() const;
    friend bool operator==(const Validity&, const Validity&) = default;
};

struct PlanKey {
    Family family = Family::llama;
    // Model geometry: everything the plan's op list and buffers are sized by.
    int vocab = 0, dim = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0;
    float rope_theta = 0.0f, norm_eps = 0.0f;
    Dtype dtype = Dtype::f32;
    int max_seq_len = 0;  // the cache's capacity (paged: the model's max_seq_len)
    int block_size = 0;   // paged KV: the pool's block size; 0 for a dense cache
    int n_layers = 0;
    ModelInstanceId model;
    KvAllocId alloc;
    AdapterSetId adapters;  // which LoRA adapters the plan's ops apply (their scales are step data)
    // Read only by fault switches: an address or a digest as model identity, and the
    // per-token position that must never be part of a key (the position at
    // build time, which the *_not_rebound faults keep using).
    const void* weight_address = nullptr;
    int position = 0;
    std::uint64_t weight_digest = 0;  // computed only under model_key_by_content
    // Step data the lora_scale_in_key, cvec_in_key and warmup_in_key faults key on.
    std::uint64_t scales_version = 0, cvec_version = 0, warmup_version = 0;
    bool moe = false;  // warmup_in_key keys warmup only where it routes
};

// Throws Error when the cache cannot serve the model at all (layer count,
// KV width or capacity): that is a usage error, not a stale plan.
void require_cache_fits(const Model& model, const KvCache& cache);

PlanKey key_of(const Model& model, const KvCache& cache, const Adapters& adapters);
// For a paged plan over `pool`, about to decode at `position`.
PlanKey key_of(const Model& model, const KvPool& pool, int position, const Adapters& adapters);
Validity check(const PlanKey& held, const PlanKey& now);

}  // namespace kvweld
