// Fault switches: named, off-by-default re-creations of real bug classes,
// so the harness can be seen to catch them (see DESIGN.md). They exist only
// in builds with KVWELD_FAULTS; elsewhere fault_on() is constant false and
// the faulty branches compile away.
//
// The active set is per thread (a simulator run is one seed on one thread),
// installed for a scope by ScopedFaults.
#pragma once

#include <cstdint>
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
};

// How the harness is expected to notice each fault.
enum class Detection : std::uint8_t { stale_decode, spurious_invalidation, missed_invalidation };

struct FaultInfo {
    Fault fault;
    std::string_view name;
    Detection expected;
    std::string_view bug;
};

std::span<const FaultInfo> all_faults();
std::optional<Fault> fault_from_name(std::string_view name);
std::string_view to_string(Fault f);
std::string_view to_string(Detection d);
std::string fault_names();  // "a, b, c" for help texts and errors

class FaultSet {
public:
    void add(Fault f) { bits_ |= bit(f); }
    bool has(Fault f) const { return (bits_ & bit(f)) != 0; }
    bool empty() const { return bits_ == 0; }
    std::string describe() const;  // "none" or "a+b"

private:
    static std::uint32_t bit(Fault f) { return 1u << static_cast<unsigned>(f); }
    std::uint32_t bits_ = 0;
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
