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
//                   (calls::OpenSized, through Engine::apply)
//   migrate         a request and its storage move to another slot, whose
//                   held plan meets storage it was not built on
//                   (calls::Migrate, through Engine::apply)
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
};

}  // namespace kvweld::targets
