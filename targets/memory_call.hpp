// The memory calls a server makes of an engine between decodes, one struct
// each, as values: the simulator makes them (targets/engine.hpp's methods,
// through apply_call) and publishes each one it made to its observers
// (sim/observer.hpp): the reuse rule, the block model, the twin or peer
// engine that replays it, the ledger. A call that carries what the
// simulator's own account says (a model, the adapters before and after)
// carries it by pointer: it lives as long as the call is being published.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"
#include "engine/sampling.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>

namespace kvweld::targets {

class Engine;

namespace calls {

struct Open {
    int seq;
};
// White box: open on a storage of `capacity` positions, or on the storage
// the slot kept (recycle), rewound.
struct OpenSized {
    int seq, capacity;
    bool recycle;
};
struct Close {
    int seq;
};
// `drafts`: a step's rejected drafts rewound (the storage is judged at the
// next decode, as before a truncate of the op's own).
struct Truncate {
    int seq, n;
    bool drafts = false;
};
struct Clear {
    int seq;
};
// dst takes src's positions; `opened`: dst was free and is opened first.
struct Copy {
    int src, dst;
    bool opened = false;
};
struct ClearAll {};
struct Reload {
    const Model* model;
};
struct SwapLayer {
    int seq, layer;
};
struct PoolOp {
    int op;  // KVWELD_POOL_COMPACT, _GROW or _RESET
};
// White box: a request and its storage move to another slot.
struct Migrate {
    int from, to;
};
// The adapters every later decode runs with; `before` and `after` as the
// simulator's own account has them (the rule judges by those).
struct SetLoras {
    std::span<const LoraUse> uses;
    const Adapters* before;
    const Adapters* after;
};
struct SetCvec {
    const ControlVector* cvec;  // nullptr: none
    const Adapters* before;
    const Adapters* after;
};
struct SetWarmup {
    bool on;
    const Adapters* before;
    const Adapters* after;
};
// A context shift of a sequence of `len` positions: [p0, p1) removed.
struct Shift {
    int seq, p0, p1, len;
};
// A sequence's state saved as state `id` (a serial of the simulator's); each
// engine keeps its own bytes of it.
struct Save {
    int seq, id;
};
// Saved state `id`, of `len` positions, loaded into an open sequence.
struct Load {
    int seq, len, id;
};
// A state load into `seq` refused (the sequence must keep what it held).
struct LoadRefused {
    int seq;
};
// ABI 9: a live setting (Engine::live_settings) for every later decode.
struct SetLive {
    std::string key, value;
};
// ABI 11: sequence id `seq`'s sampler chain (nullopt: cleared); in_place:
// the chain it holds is changed where it is.
struct SetSampler {
    int seq;
    std::optional<SamplerSpec> spec;
    bool in_place = false;
};

}  // namespace calls

using MemoryCall = std::variant<calls::Open, calls::OpenSized, calls::Close, calls::Truncate, calls::Clear, calls::Copy,
                                calls::ClearAll, calls::Reload, calls::SwapLayer, calls::PoolOp, calls::Migrate,
                                calls::SetLoras, calls::SetCvec, calls::SetWarmup, calls::Shift, calls::Save,
                                calls::Load, calls::LoadRefused, calls::SetLive, calls::SetSampler>;

// The call made of `engine`. Save, Load and LoadRefused move bytes each
// engine keeps for itself, so their owner makes them (throws Error here).
void apply_call(Engine& engine, const MemoryCall& call);

}  // namespace kvweld::targets
