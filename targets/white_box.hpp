// What only an engine running in this process can show or do, declared as
// capabilities beside the ABI's (Engine::white_box(); nullptr behind a
// plugin). kvweld's dense engine has them all; the simulator switches the
// ops and oracles that need them on when they are there, and says so.
//   pinned storage  the storage objects a sequence holds, which the ledger
//                   pins: the kv oracle reads them (not what the engine
//                   reports afterwards), dead rows are poisoned with NaN,
//                   and the blindness counts compare them with the storage
//                   a stale plan would read
//   capacities      a sequence opened with fewer positions than n_ctx, on
//                   new storage or on the slot's own storage rewound
//   migrate         a request and its storage move to another slot, whose
//                   held plan meets storage it was not built on
#pragma once

#include "engine/kv_cache.hpp"

#include <span>
#include <vector>

namespace kvweld::targets {

class WhiteBox {
public:
    virtual ~WhiteBox() = default;
    // The storage objects `seq` holds now, one per layer.
    virtual std::vector<KvLayer> held_layers(int seq) const = 0;
    // Opens `seq` with `capacity` positions (1..n_ctx): new storage, or with
    // `recycle` the storage the slot kept from its last request, rewound
    // (Error when it kept none or it has another capacity).
    virtual void open_sized(int seq, int capacity, bool recycle) = 0;
    // Moves open `from`'s storage to closed `to`, which opens on it; `from` closes with none.
    virtual void migrate(int from, int to) = 0;
};

}  // namespace kvweld::targets
