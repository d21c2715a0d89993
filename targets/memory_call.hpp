// The memory calls a server makes of an engine between decodes, one struct
// each, as values: the one description of a call. The engine takes it
// (Engine::apply), the reuse rule hears it (ReuseRule::on_call), and the
// simulator publishes each one it made to its observers (sim/observer.hpp):
// the block model, the twin or peer engine that replays it, the ledger,
// the data shadow. Every visit over a call is exhaustive (util/overloaded.hpp's
// Ignored<...> names what a visitor leaves alone), so a new kind fails to
// compile wherever it is not handled. A call that carries what the
// simulator's own account says (a model, the adapters before and after)
// carries it by pointer: it lives as long as the call is being published.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"
#include "engine/sampling.hpp"
#include "util/error.hpp"
#include "util/overloaded.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace kvweld::targets {

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
// KVWELD_CAP_RELOAD: the same shape, new or the same weights, handed over
// as the engine takes models (a plugin: a file in its model_format()).
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
// KVWELD_CAP_LORA: the LoRA adapters, each at its scale, every later decode
// runs with (empty: none); `before` and `after` as the simulator's own
// account has them (the rule judges by those, the engine ignores them).
// Adapters, the control vector and warmup survive a reload; a bad adapter
// or vector is an Error naming it, and nothing changes.
struct SetLoras {
    std::span<const LoraUse> uses;
    const Adapters* before;
    const Adapters* after;
};
// KVWELD_CAP_CVEC: the control vector every later decode adds.
struct SetCvec {
    const ControlVector* cvec;  // nullptr: none
    const Adapters* before;
    const Adapters* after;
};
// KVWELD_CAP_WARMUP: llama.cpp's warmup routing for an MoE model
// (engine/adapters.hpp).
struct SetWarmup {
    bool on;
    const Adapters* before;
    const Adapters* after;
};
// KVWELD_CAP_SHIFT, a context shift of a sequence of `len` positions: [p0,
// p1) removed, the later ones moved down by p1 - p0 (their keys re-rotated);
// `len` is the simulator's account, which the engine does not need.
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
// ABI 9: a live setting (Engine::live_settings) for every later decode (an
// Error naming a key or value the engine cannot take).
struct SetLive {
    std::string key, value;
};
// ABI 11, KVWELD_CAP_SAMPLERS: sequence id `seq`'s sampler chain for every
// later decode (nullopt: cleared); in_place: the chain it holds is changed
// where it is (engine_abi.h).
struct SetSampler {
    int seq;
    std::optional<SamplerSpec> spec;
    bool in_place = false;
};

// ABI 14, KVWELD_CAP_KEEP (llama.cpp's llama_memory_seq_keep): every
// sequence but `seq` emptied; `emptied` is the simulator's account of the
// other open ones that held positions (the only ones it changes), which
// the engine does not need.
struct Keep {
    int seq;
    std::vector<int> emptied;
};

}  // namespace calls

using MemoryCall = std::variant<calls::Open, calls::OpenSized, calls::Close, calls::Truncate, calls::Clear, calls::Copy,
                                calls::ClearAll, calls::Reload, calls::SwapLayer, calls::PoolOp, calls::Migrate,
                                calls::SetLoras, calls::SetCvec, calls::SetWarmup, calls::Shift, calls::Save,
                                calls::Load, calls::LoadRefused, calls::SetLive, calls::SetSampler, calls::Keep>;

// An engine's answer to a call whose bytes its caller holds (Save, Load,
// LoadRefused: made through Engine::state_save and state_load).
[[noreturn]] inline void refuse_own_bytes(const std::string& engine, const char* call) {
    throw Error(cat("engine ", engine, ": ", call, " moves the caller's own bytes: make it through state_save or state_load"));
}

// Engine::apply for an engine whose members carry the calls' names (open,
// close, truncate, clear, copy, keep, clear_all, reload, swap_layer, pool_op,
// migrate, open_sized, set_loras, set_cvec, set_warmup, shift, set_live,
// set_sampler): each call to its member, exhaustively; the bytes a save or
// load moves are the caller's (refuse_own_bytes).
template <class E>
void apply_to_members(E& e, const MemoryCall& call) {
    std::visit(Overloaded{
                   [&](const calls::Open& c) { e.open(c.seq); },
                   [&](const calls::OpenSized& c) { e.open_sized(c.seq, c.capacity, c.recycle); },
                   [&](const calls::Close& c) { e.close(c.seq); },
                   [&](const calls::Truncate& c) { e.truncate(c.seq, c.n); },
                   [&](const calls::Clear& c) { e.clear(c.seq); },
                   [&](const calls::Copy& c) {
                       if (c.opened) e.open(c.dst);
                       e.copy(c.src, c.dst);
                   },
                   [&](const calls::ClearAll&) { e.clear_all(); },
                   [&](const calls::Keep& c) { e.keep(c.seq); },
                   [&](const calls::Reload& c) { e.reload(*c.model); },
                   [&](const calls::SwapLayer& c) { e.swap_layer(c.seq, c.layer); },
                   [&](const calls::PoolOp& c) { e.pool_op(c.op); },
                   [&](const calls::Migrate& c) { e.migrate(c.from, c.to); },
                   [&](const calls::SetLoras& c) { e.set_loras(c.uses); },
                   [&](const calls::SetCvec& c) { e.set_cvec(c.cvec); },
                   [&](const calls::SetWarmup& c) { e.set_warmup(c.on); },
                   [&](const calls::Shift& c) { e.shift(c.seq, c.p0, c.p1); },
                   [&](const calls::SetLive& c) { e.set_live(c.key, c.value); },
                   [&](const calls::SetSampler& c) { e.set_sampler(c.seq, c.spec ? &*c.spec : nullptr, c.in_place); },
                   [&](const calls::Save&) { refuse_own_bytes(e.name(), "a state save"); },
                   [&](const calls::Load&) { refuse_own_bytes(e.name(), "a state load"); },
                   [&](const calls::LoadRefused&) { refuse_own_bytes(e.name(), "a refused state load"); },
               },
               call);
}

}  // namespace kvweld::targets
