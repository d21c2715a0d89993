// The storage ledger: the simulator's own record of which KV storage every
// cache holds, kept from its op log, never copied from the engine.
//
// A cache reports its storage only when the simulator has just replaced it
// (construct, clear(), set_layer()). The ledger accepts that report only if
// every serial in it is one this run has never seen and the layers' serials
// are distinct; otherwise the engine broke the storage contract and the run
// ends with an engine_error naming the op. Why that is enough: serials are
// minted by a process-wide counter and never recycled, so a serial that is
// new to the run names storage that did not exist before the op. A cache
// that kept, shared or re-used old storage behind a "replacement" must
// report at least one serial the run has seen, and is caught here. Once
// accepted, the ledger pins the storage objects themselves: the weld oracle
// compares the plan's bound serials with the ledger's, and the KV content
// oracle reads the ledger's storage directly, so neither trusts what the
// cache says afterwards.
#pragma once

#include "engine/kv_cache.hpp"

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvweld::sim {

class StorageLedger {
public:
    // Checks that `layers` (what a cache reports after replacing all its
    // storage) is new to the run and distinct; records the serials as seen.
    // Returns the violation, if any.
    std::optional<std::string> accept(const std::vector<KvLayer>& layers);

    bool seen(StorageSerial s) const { return seen_.count(s) != 0; }

private:
    std::set<StorageSerial> seen_;  // ordered: never iterated for behaviour, but kept deterministic
};

// One cache's entry: the storage the ledger says it holds, pinned.
struct LedgerEntry {
    std::vector<KvLayer> storage;
    std::vector<StorageSerial> serials() const;
};

}  // namespace kvweld::sim
