// Fault switches: named, off-by-default re-creations of real bug classes,
// so the harness can be seen to catch them (docs/DESIGN.md has the table). They exist only
// in builds with KVWELD_FAULTS; elsewhere fault_on() is constant false and
// the faulty branches compile away.
//
// The active set is per thread (a simulator run is one seed on one thread),
// installed for a scope by ScopedFaults.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvweld {

enum class Fault : std::uint8_t {
    geometry_only_key,       // key omits model and allocation ids
    no_remint_on_clear,      // clear() keeps the id
    no_remint_on_set_layer,  // set_layer() keeps the id
    remint_on_truncate,      // truncate_to() mints a new id
    model_id_not_in_key,     // model instance left out of the key
    weight_pointer_key,      // model keyed by its weight buffer's address
    partial_rebind,          // rebind moves only some layers
    offset_not_rebound,      // KV write offset kept from the build
    mask_not_rebound,        // attention length kept from the build
    spec_reject_off_by_one,  // speculative reject truncates to base+m+1
    always_stale,            // every check says Stale
    position_in_key,         // per-token data in the key
    model_key_by_content,    // model identity by a digest of the weights
    build_counted_as_kept,   // the session counts a rebuild as a kept plan
    refeed_write_skipped,    // a position below the plan's high-water mark is taken as written
    // Paged KV (engine/kv_pool.hpp): only the paged design can show these.
    stale_block_table,     // the plan keeps the block table it first ran with
    freed_block_in_table,  // truncate frees blocks but leaves them in the table
    cow_skipped,           // a write into a shared block goes in place
    grow_keeps_id,         // grow (or reset) replaces the storage but keeps the pool's id
    compact_skips_table,   // compaction moves a block without re-pointing one table
    refcount_off_by_one,   // fork takes no reference on the last block
    // Adapters (engine/adapters.hpp): the set is key, scales and control vector step data.
    adapter_set_not_in_key,  // a new adapter set keeps the plan (and its old LoRA ops)
    lora_scale_baked,        // the plan keeps the scales it was built with
    lora_scale_in_key,       // a scale change rebuilds
    cvec_baked,              // the plan keeps the control vector it was built with
    cvec_in_key,             // a control vector change rebuilds
    // Mixture of experts: warmup routing is step data.
    warmup_baked,   // the plan keeps the warmup routing it was built with (llama.cpp 0.3.36's graph does)
    warmup_in_key,  // a warmup switch rebuilds
    // Context shift (KvCache::shift): the rotation is data, the storage kept.
    shift_rotation_skipped,   // moved key rows keep the rotation of their old positions
    shift_delta_overwritten,  // a second shift before the rotation replaces the delta owed (llama.cpp issue 3825)
    shift_remints_id,         // a shift mints a new allocation id: the plan is moved for nothing
    // Live settings: the thread count is step data.
    threads_in_key,  // a thread-count change drops the held plan (the next decode builds one)
    // Embeddings: the hidden state is the step's output, like its logits.
    embeddings_baked,  // the plan hands back the embeddings of the first step they were read for
    // Backend samplers: a sequence's chain is step data.
    sampler_baked,  // the plan samples with the chain its sequence had when it was built
    // The abort callback: a stopped call keeps the tokens it finished.
    abort_keeps_stopped,  // the token the call stopped at is counted as held, its K/V never written
    // Causal attention on or off: the mask is step data.
    causal_baked,  // the plan keeps the attention mode (causal or not) of its first run
};

// How the harness may notice a fault. engine_error: the engine's reports
// contradict each other (a counter that lies).
enum class Detection : std::uint8_t { stale_decode, spurious_invalidation, missed_invalidation, engine_error };

// The classes a fault may legitimately show as: some faults are a stale
// decode on one seed and a missed invalidation on another (a reload of the
// same weights makes a stale plan exactly right).
class Detections {
public:
    constexpr Detections() = default;
    constexpr Detections(std::initializer_list<Detection> ds) {
        for (Detection d : ds) bits_ |= bit(d);
    }
    constexpr bool has(Detection d) const { return (bits_ & bit(d)) != 0; }
    constexpr void add(Detection d) { bits_ |= bit(d); }
    constexpr bool empty() const { return bits_ == 0; }
    std::string describe() const;  // "stale_decode|missed_invalidation"
    // The inverse of describe(); an unknown or empty class throws Error naming it.
    static Detections parse(std::string_view text);

private:
    static constexpr std::uint8_t bit(Detection d) { return std::uint8_t(1u << unsigned(d)); }
    std::uint8_t bits_ = 0;
};

// Which KV design a fault lives in: kvweld's dense engine (in process, or
// its plugin) or its paged one (`--engine kvweld-paged`).
enum class FaultDesign : std::uint8_t { dense, paged, both };

struct FaultInfo {
    Fault fault;
    std::string_view name;
    Detections expected;
    std::string_view bug;
    FaultDesign design = FaultDesign::dense;
    // Reached only by what the simulator plays in process (the scheduler's
    // speculative rewind): kvweld's plugins leave it out.
    bool in_process_only = false;
    // Acts on the decode settings (adapters, warmup: engine/adapters.hpp;
    // the thread count, samplers) or the abort callback, not on KV or
    // model: calls the contract properties' model has not got.
    bool adapters = false;
};

std::span<const FaultInfo> all_faults();
std::optional<Fault> fault_from_name(std::string_view name);
// The fault named `name`, for an engine of the `design`. Throws Error
// naming it when it is unknown, or when it lives in the other design (and
// says where it runs).
Fault require_fault(std::string_view name, FaultDesign design);
std::string_view to_string(Fault f);
std::string_view to_string(Detection d);  // the Verdict's name for the same class
std::span<const Detection> all_detections();
std::string fault_names();  // "a, b, c" for help texts and errors

class FaultSet {
public:
    void add(Fault f) { bits_ |= bit(f); }
    bool has(Fault f) const { return (bits_ & bit(f)) != 0; }
    bool empty() const { return bits_ == 0; }
    std::string describe() const;  // "none" or "a+b"

private:
    static std::uint64_t bit(Fault f) { return std::uint64_t{1} << static_cast<unsigned>(f); }
    std::uint64_t bits_ = 0;
};

constexpr bool kFaultsCompiled =
#ifdef KVWELD_FAULTS
    true;
#else
    false;
#endif

namespace detail {
FaultSet& thread_faults();
}

inline bool fault_on(Fault f) {
    if constexpr (!kFaultsCompiled) return false;
    return detail::thread_faults().has(f);
}

// Installs a fault set on this thread for the guard's lifetime. Throws
// Error when the set is not empty in a build without KVWELD_FAULTS.
class ScopedFaults {
public:
    explicit ScopedFaults(FaultSet faults);
    ~ScopedFaults();
    ScopedFaults(const ScopedFaults&) = delete;
    ScopedFaults& operator=(const ScopedFaults&) = delete;

private:
    FaultSet saved_;
};

}  // namespace kvweld
