// Never-recycled identities. Every id comes from a process-wide atomic
// counter that starts at 1; 0 is never a real id. Identity is by counter,
// never by geometry or pointer value, so a re-used address can not alias.
#pragma once

#include <atomic>
#include <compare>
#include <cstdint>
#include <functional>

namespace kvweld {

template <class Tag>
class Id {
public:
    constexpr Id() = default;  // 0: "no id"
    static Id mint() { return Id(counter_.fetch_add(1, std::memory_order_relaxed)); }
    constexpr std::uint64_t get() const { return value_; }
    constexpr explicit operator bool() const { return value_ != 0; }
    friend constexpr auto operator<=>(Id, Id) = default;

private:
    constexpr explicit Id(std::uint64_t v) : value_(v) {}
    static inline std::atomic<std::uint64_t> counter_{1};
    std::uint64_t value_ = 0;
};

struct ModelInstanceTag;
struct KvAllocTag;
struct StorageSerialTag;

// Minted once per constructed or loaded model (a reload is a new model).
using ModelInstanceId = Id<ModelInstanceTag>;
// Minted once per KV allocation: construct, clear(), set_layer().
using KvAllocId = Id<KvAllocTag>;
// Minted once per layer storage buffer; the weld oracle compares these.
using StorageSerial = Id<StorageSerialTag>;
// Minted once per built plan; a rebind or a kept plan keeps it. The
// simulator cross-checks the session's counters against it.
struct PlanSerialTag;
using PlanSerial = Id<PlanSerialTag>;
// Minted once per LoRA adapter, and per change of which adapters an
// engine's set holds (engine/adapters.hpp): the adapter set is in the key.
struct AdapterTag;
using AdapterId = Id<AdapterTag>;
struct AdapterSetTag;
using AdapterSetId = Id<AdapterSetTag>;

}  // namespace kvweld

template <class Tag>
struct std::hash<kvweld::Id<Tag>> {
    std::size_t operator()(kvweld::Id<Tag> id) const noexcept {
        return std::hash<std::uint64_t>{}(id.get());
    }
};
