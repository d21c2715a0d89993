// The simulator's operations (sim/simulator.hpp): what a server does to an
// engine through the engine interface. Each op carries every argument
// drawn for it, and sequence choices are
// picks (an index into whatever is eligible when the op runs), so a trace
// replays without the generator and stays meaningful after shrinking.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvweld::sim {

enum class OpKind : std::uint8_t {
    admit,      // open a free sequence for a new request; its prompt is fed by later steps
    step,       // one engine call for every sequence that takes part (continuous batching)
    truncate,   // rewind a sequence; the dropped tokens are fed again (or others: rewrite)
    preempt,    // clear a sequence; its whole history is fed again (re-prefill; or another: rewrite)
    fork,       // copy a sequence into a free one; both go on (prefix sharing)
    retire,     // close a sequence
    clear_all,  // clear every sequence; each re-prefills
    reload,     // the engine reloads the model (same shape, same or new weights); every sequence re-prefills
    swap_layer, // offload and restore: one layer of a sequence's KV moves to new storage, same content
    compact,    // paged KV: the engine moves blocks in use to the lowest numbers, in place
    grow,       // paged KV: the engine replaces its pool's storage with a larger one
    reset,      // paged KV: every sequence emptied, the pool's storage replaced; every sequence re-prefills
    invalid,    // a call the engine must refuse, naming the bad value, and that changes nothing
    migrate,    // white box: a request and its storage move to a free slot (whose held plan did not build on it)
    lora,       // white box: the LoRA adapters every later decode runs with, each at a scale (a new set, new scales, none)
    cvec,       // white box: the control vector every later decode adds (set, changed, re-ranged or cleared)
    warmup,     // llama.cpp's warmup routing on or off (an MoE model's engine with the capability)
    shift,      // a context shift: keep the first n_keep positions, drop a chunk after them, move the rest down
    save,       // a sequence's state saved (a slot save, or an idle conversation offloaded)
    load,       // a saved state loaded into an open or a free sequence (same or another, maybe after others left)
    steady,     // a steady-state phase: `steps` steps in a row, every sequence asking the same tokens each step
};
inline constexpr int kOpKinds = 21;
// The most saved states a run keeps (the oldest goes first), and the
// longest steady phase one op plays.
inline constexpr int kSavedStates = 4;
inline constexpr int kMaxSteadySteps = 256;
// The LoRA adapters a run has (drawn from its weights seed); a lora op names them by index.
inline constexpr int kLoraPool = 3;
std::string_view to_string(OpKind k);
OpKind op_kind_from_string(std::string_view s);  // throws Error naming s

struct Op {
    OpKind kind = OpKind::step;
    std::uint32_t pick = 0;    // which eligible sequence (fork: the source; load: which saved state)
    // fork, migrate, load: which destination; invalid: which bad call (of
    // those the state allows); admit: which of the seed's capacities (white
    // box); shift: how many positions it drops (1..what follows n_keep)
    std::uint32_t pick2 = 0;
    bool recycle = false;      // admit (white box): on the storage the slot kept, rewound, where it kept some
    bool onto_open = false;    // fork, load: onto an open sequence (its positions replaced), where there is one
    std::vector<int> tokens;   // admit: the prompt
    int max_new = 0;           // admit: output budget
    // step, steady: tokens asked of each sequence id (0 = sits out). A sequence in
    // prefill feeds up to that many prompt tokens (a chunk); one decoding
    // feeds its pending token and up to wants-1 speculative drafts.
    std::vector<int> wants;
    bool last_only = false;    // step: a prefill chunk asks for its last row's logits only (an engine with outputs)
    std::uint32_t length = 0;  // truncate: the new length (mod length + 1); shift: n_keep (mod length); steady: steps
    bool twice = false;        // shift: a second shift of the same sequence before its next decode
    // truncate, preempt: the dropped tokens are fed again changed (each one
    // replaced by another, drawn from `seed`), so the KV rows at those
    // positions must be written anew: an engine that skips that write
    // decodes over the old rows and the data oracle sees it.
    bool rewrite = false;
    int layer = 0;             // swap_layer: which layer (mod the model's layers)
    bool same_weights = false; // reload: the weights it has now, or new ones from `seed`
    std::uint64_t seed = 0;    // step: drafts, accepted counts and sampling; reload: new weights; rewrite:
                               // tokens; invalid: the bad value; cvec: the vector's data
    std::vector<int> adapters;  // lora: which of the run's adapters (0..kLoraPool-1, each once), in order
    std::vector<float> scales;  // lora: each one's scale
    bool clear = false;         // cvec: none from now on
    int layer_end = 0;          // cvec: the range is [layer, layer_end] (each mod the model's layers)
    bool on = false;            // warmup: on or off (the same again is drawn too)
};

inline Op make_op(OpKind kind, std::uint32_t pick = 0) {
    Op op;
    op.kind = kind;
    op.pick = pick;
    return op;
}

void to_json(nlohmann::json& j, const Op& op);
Op op_from_json(const nlohmann::json& j);  // strict; throws Error naming the field

}  // namespace kvweld::sim
