// The simulator's operations (sim/simulator.hpp): what a server does to an
// engine through the engine interface. Each kind is one struct below,
// holding its typed arguments, its name and its OpKind; the variant OpArgs
// lists them in OpKind's order. Everything else of a kind is in its own
// file, sim/ops/<name>.cpp: its weight in a seed's config, when it is
// eligible, its invalid variants, and its one draw over an entropy source (the swarm's PRNG, or a fuzzer's input bytes:
// sim/entropy.hpp), its JSON both ways (KVWELD_OP_ROW below), and what it
// does (Simulator::run). A kind whose file lacks one of them does not link.
// Sequence choices are picks (an index into whatever is eligible when the
// op runs), so a trace replays without the generator and stays meaningful
// after shrinking.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kvweld::sim {

class Entropy;
class Simulator;
struct InvalidCall;
struct InvalidSite;
struct WeightSite;

// An op struct's row, defined in sim/ops/<name>.cpp: its weight in a
// seed's config (0: never drawn; sim/ops/weight_site.hpp), the sequences
// it may act on now ({0} for an op of the engine's that needs no sequence;
// empty: it cannot run now), its draw (`pick` chooses among the eligible),
// and its JSON both ways (read is strict and throws Error naming the field).
#define KVWELD_OP_ROW(T)                                         \
    static int weight(const WeightSite& s);                      \
    static std::vector<int> eligible(const Simulator& s);        \
    static T draw(const Simulator& s, Entropy& e, std::uint32_t pick); \
    static void write(nlohmann::json& j, const T& a);            \
    static T read(const nlohmann::json& j)

// A wrong form of the op the invalid op may make, defined in the op's own
// file (sim/ops/invalid_call.hpp); sim/ops/invalid.cpp lists them in the
// order a seed picks from.
#define KVWELD_INVALID(name) static std::optional<InvalidCall> name(const InvalidSite& s)

enum class OpKind : std::uint8_t {
    admit, step, truncate, preempt, fork, retire, clear_all, reload, swap_layer, compact, grow, reset, invalid,
    migrate, lora, cvec, warmup, shift, save, load, steady, live, sampler, abort, keep,
};

// The most saved states a run keeps (the oldest goes first), and the
// longest steady phase one op plays.
inline constexpr int kSavedStates = 4;
inline constexpr int kMaxSteadySteps = 256;
// The LoRA adapters a run has (drawn from its weights seed); a lora op names them by index.
inline constexpr int kLoraPool = 3;

namespace ops {

// truncate, preempt: the dropped tokens are fed again changed (each one
// replaced by another, drawn from `seed`), so the KV rows at those
// positions must be written anew: an engine that skips that write decodes
// over the old rows and the data oracle sees it.
struct Rewrite {
    bool on = false;
    std::uint64_t seed = 0;
};

// Open a free sequence for a new request; its prompt is fed by later steps.
struct Admit {
    static constexpr OpKind kind = OpKind::admit;
    static constexpr std::string_view name = "admit";
    KVWELD_OP_ROW(Admit);
    KVWELD_INVALID(open_twice);
    KVWELD_INVALID(open_out_of_range);
    std::uint32_t pick = 0;
    std::vector<int> prompt = {};
    int max_new = 0;            // output budget
    std::uint32_t capacity = 0; // white box: which of the seed's capacities
    bool recycle = false;       // white box: on the storage the slot kept, rewound, where it kept some
};
// One engine call for every sequence that takes part (continuous batching).
struct Step {
    static constexpr OpKind kind = OpKind::step;
    static constexpr std::string_view name = "step";
    KVWELD_OP_ROW(Step);
    KVWELD_INVALID(token_out_of_range);
    KVWELD_INVALID(on_closed);
    KVWELD_INVALID(over_capacity);
    // Tokens asked of each sequence id (0 = sits out). A sequence in prefill
    // feeds up to that many prompt tokens (a chunk); one decoding feeds its
    // pending token and up to wants-1 speculative drafts.
    std::vector<int> wants = {};
    std::uint64_t seed = 0;  // drafts, accepted counts and sampling
    bool last_only = false;  // a prefill chunk asks for its last row's logits only (an engine with outputs)
};
// Rewind a sequence; the dropped tokens are fed again (or others: rewrite).
struct Truncate {
    static constexpr OpKind kind = OpKind::truncate;
    static constexpr std::string_view name = "truncate";
    KVWELD_OP_ROW(Truncate);
    KVWELD_INVALID(past_length);
    static constexpr std::array<std::string_view, 1> variants{"rewrite"};
    std::uint32_t pick = 0;
    std::uint32_t length = 0;  // the new length, mod the length + 1
    Rewrite rewrite = {};
};
// Clear a sequence; its whole history is fed again (re-prefill; or another: rewrite).
struct Preempt {
    static constexpr OpKind kind = OpKind::preempt;
    static constexpr std::string_view name = "preempt";
    KVWELD_OP_ROW(Preempt);
    static constexpr std::array<std::string_view, 1> variants{"rewrite"};
    std::uint32_t pick = 0;
    Rewrite rewrite = {};
};
// Copy a sequence into a free one, or onto an open one; both go on (prefix sharing).
struct Fork {
    static constexpr OpKind kind = OpKind::fork;
    static constexpr std::string_view name = "fork";
    KVWELD_OP_ROW(Fork);
    KVWELD_INVALID(onto_itself);
    static constexpr std::array<std::string_view, 2> variants{"onto_free", "onto_open"};
    std::uint32_t pick = 0;  // the source
    std::uint32_t to = 0;    // which destination
    bool onto_open = false;  // onto an open sequence (its positions replaced), where there is one
};
// Close a sequence.
struct Retire {
    static constexpr OpKind kind = OpKind::retire;
    static constexpr std::string_view name = "retire";
    KVWELD_OP_ROW(Retire);
    std::uint32_t pick = 0;
};
// Clear every sequence; each re-prefills.
struct ClearAll {
    static constexpr OpKind kind = OpKind::clear_all;
    static constexpr std::string_view name = "clear_all";
    KVWELD_OP_ROW(ClearAll);
};
// The engine reloads the model (same shape, same or new weights); every sequence re-prefills.
struct Reload {
    static constexpr OpKind kind = OpKind::reload;
    static constexpr std::string_view name = "reload";
    KVWELD_OP_ROW(Reload);
    static constexpr std::array<std::string_view, 2> variants{"same_weights", "new_weights"};
    bool same_weights = false;
    std::uint64_t seed = 0;  // the new weights
};
// Offload and restore: one layer of a sequence's KV moves to new storage, same content.
struct SwapLayer {
    static constexpr OpKind kind = OpKind::swap_layer;
    static constexpr std::string_view name = "swap_layer";
    KVWELD_OP_ROW(SwapLayer);
    std::uint32_t pick = 0;
    int layer = 0;  // mod the model's layers
};
// Paged KV: the engine moves blocks in use to the lowest numbers, in place.
struct Compact {
    static constexpr OpKind kind = OpKind::compact;
    static constexpr std::string_view name = "compact";
    KVWELD_OP_ROW(Compact);
};
// Paged KV: the engine replaces its pool's storage with a larger one.
struct Grow {
    static constexpr OpKind kind = OpKind::grow;
    static constexpr std::string_view name = "grow";
    KVWELD_OP_ROW(Grow);
};
// Paged KV: every sequence emptied, the pool's storage replaced; every sequence re-prefills.
struct Reset {
    static constexpr OpKind kind = OpKind::reset;
    static constexpr std::string_view name = "reset";
    KVWELD_OP_ROW(Reset);
};
// A call the engine must refuse, naming the bad value, and that changes nothing.
struct Invalid {
    static constexpr OpKind kind = OpKind::invalid;
    static constexpr std::string_view name = "invalid";
    KVWELD_OP_ROW(Invalid);
    std::uint32_t pick = 0;
    std::uint32_t call = 0;  // which bad call, of those the state allows
    std::uint64_t seed = 0;  // the bad value
};
// White box: a request and its storage move to a free slot (whose held plan did not build on it).
struct Migrate {
    static constexpr OpKind kind = OpKind::migrate;
    static constexpr std::string_view name = "migrate";
    KVWELD_OP_ROW(Migrate);
    std::uint32_t pick = 0;
    std::uint32_t to = 0;
};
// The LoRA adapters every later decode runs with, each at a scale (a new set, new scales, none).
struct Lora {
    static constexpr OpKind kind = OpKind::lora;
    static constexpr std::string_view name = "lora";
    KVWELD_OP_ROW(Lora);
    KVWELD_INVALID(other_shape);
    static constexpr std::array<std::string_view, 2> variants{"set", "none"};
    std::vector<int> adapters = {};  // which of the run's adapters (0..kLoraPool-1, each once), in order
    std::vector<float> scales = {};  // each one's scale
};
// The control vector every later decode adds (set, changed, re-ranged or cleared).
struct Cvec {
    static constexpr OpKind kind = OpKind::cvec;
    static constexpr std::string_view name = "cvec";
    KVWELD_OP_ROW(Cvec);
    KVWELD_INVALID(past_layers);
    static constexpr std::array<std::string_view, 2> variants{"set", "clear"};
    bool clear = false;      // none from now on
    std::uint64_t seed = 0;  // the vector's data
    int start = 0, end = 0;  // the range [start, end], each mod the model's layers
};
// llama.cpp's warmup routing on or off (an MoE model's engine with the capability).
struct Warmup {
    static constexpr OpKind kind = OpKind::warmup;
    static constexpr std::string_view name = "warmup";
    KVWELD_OP_ROW(Warmup);
    static constexpr std::array<std::string_view, 2> variants{"on", "off"};
    bool on = false;
};
// A context shift: keep the first n_keep positions, drop a chunk after them, move the rest down.
struct Shift {
    static constexpr OpKind kind = OpKind::shift;
    static constexpr std::string_view name = "shift";
    KVWELD_OP_ROW(Shift);
    KVWELD_INVALID(past_length);
    static constexpr std::array<std::string_view, 2> variants{"keep_prefix", "twice"};
    std::uint32_t pick = 0;
    std::uint32_t keep = 0;     // n_keep, mod the length
    std::uint32_t discard = 0;  // how many positions it drops (1..what follows n_keep), 16 bits a round
    bool twice = false;         // a second shift of the same sequence before its next decode
};
// A sequence's state saved (a slot save, or an idle conversation offloaded).
struct Save {
    static constexpr OpKind kind = OpKind::save;
    static constexpr std::string_view name = "save";
    KVWELD_OP_ROW(Save);
    std::uint32_t pick = 0;
};
// A saved state loaded into an open or a free sequence (same or another, maybe after others left).
struct Load {
    static constexpr OpKind kind = OpKind::load;
    static constexpr std::string_view name = "load";
    KVWELD_OP_ROW(Load);
    KVWELD_INVALID(cut_short);
    static constexpr std::array<std::string_view, 3> variants{"into_free", "onto_open", "refused"};
    std::uint32_t state = 0;  // which saved state
    std::uint32_t to = 0;     // which destination
    bool onto_open = false;
};
// A steady-state phase: `steps` steps in a row, every sequence asking the same tokens each step.
struct Steady {
    static constexpr OpKind kind = OpKind::steady;
    static constexpr std::string_view name = "steady";
    KVWELD_OP_ROW(Steady);
    std::vector<int> wants = {};
    std::uint64_t seed = 0;
    std::uint32_t steps = 0;
};

// A live setting (ABI 9: what a server changes between decodes, llama.cpp's
// llama_set_n_threads and the like), one of those the engine lists, at one
// of the values it lists for it.
struct Live {
    static constexpr OpKind kind = OpKind::live;
    static constexpr std::string_view name = "live";
    KVWELD_OP_ROW(Live);
    std::string key = {}, value = {};
};

// A backend sampler chain (ABI 11: llama.cpp's llama_set_sampler) for a
// sequence id, open or not: set anew, changed in place (where the id holds
// one; else set anew), or cleared.
struct SetSampler {
    static constexpr OpKind kind = OpKind::sampler;
    static constexpr std::string_view name = "sampler";
    KVWELD_OP_ROW(SetSampler);
    KVWELD_INVALID(too_wide);
    static constexpr std::array<std::string_view, 3> variants{"new", "in_place", "clear"};
    std::uint32_t seq = 0;  // the sequence id, mod the run's sequences
    int top_k = 0;          // 0: greedy; 1..8: top-k then a seeded draw; -1: clear
    std::uint32_t seed = 0;
    bool in_place = false;
};

// The abort callback (ABI 12: llama.cpp's llama_set_abort_callback) armed
// for the next decode call: it says yes from its `after`-th question on
// (kvweld's engine asks before each token, llama.cpp's CPU backend after
// each graph node). A call it stops keeps a prefix of each sequence's
// tokens; the server feeds the rest again.
struct Abort {
    static constexpr OpKind kind = OpKind::abort;
    static constexpr std::string_view name = "abort";
    KVWELD_OP_ROW(Abort);
    std::uint32_t after = 0;
};

// Every open sequence but one emptied (ABI 14: llama.cpp's
// llama_memory_seq_keep, as a program keeps the winner of a parallel
// sampling or a beam search); each emptied one re-prefills.
struct Keep {
    static constexpr OpKind kind = OpKind::keep;
    static constexpr std::string_view name = "keep";
    KVWELD_OP_ROW(Keep);
    std::uint32_t pick = 0;  // the one kept
};

}  // namespace ops

// An op's argument variants (the `variants` its struct lists, where it has
// some): each one is counted where it took effect (RunStats::variants, as
// "kind.variant"), and `kvweld swarm --require-coverage` fails when one
// never did. A name not in the list does not compile.
template <class T>
struct Variant {
    std::size_t index;
    consteval Variant(const char* name) : index(T::variants.size()) {
        for (std::size_t i = 0; i < T::variants.size(); ++i)
            if (T::variants[i] == std::string_view(name)) index = i;
        if (index == T::variants.size()) throw "not a variant of this op";  // a compile error here
    }
};
template <class T>
concept HasVariants = requires { T::variants; };

// One alternative per kind, in OpKind's order (checked below).
using OpArgs = std::variant<ops::Admit, ops::Step, ops::Truncate, ops::Preempt, ops::Fork, ops::Retire, ops::ClearAll,
                            ops::Reload, ops::SwapLayer, ops::Compact, ops::Grow, ops::Reset, ops::Invalid,
                            ops::Migrate, ops::Lora, ops::Cvec, ops::Warmup, ops::Shift, ops::Save, ops::Load,
                            ops::Steady, ops::Live, ops::SetSampler, ops::Abort, ops::Keep>;
inline constexpr int kOpKinds = int(std::variant_size_v<OpArgs>);

namespace detail {
template <std::size_t... I>
constexpr bool kinds_in_order(std::index_sequence<I...>) {
    return ((std::size_t(std::variant_alternative_t<I, OpArgs>::kind) == I) && ...);
}
}  // namespace detail
static_assert(detail::kinds_in_order(std::make_index_sequence<kOpKinds>{}),
              "OpArgs must list the op structs in OpKind's order");

struct Op {
    OpArgs args;
    OpKind kind() const { return OpKind(args.index()); }
    // Which eligible sequence the op acts on (0 for a kind that picks none).
    std::uint32_t pick() const;
    template <class T>
    const T& as() const { return std::get<T>(args); }
    template <class T>
    T& as() { return std::get<T>(args); }
};

std::string_view to_string(OpKind k);
std::vector<std::string_view> op_variants(OpKind k);  // its struct's `variants` (none: empty)
OpKind op_kind_from_string(std::string_view s);  // throws Error naming s

void to_json(nlohmann::json& j, const Op& op);
Op op_from_json(const nlohmann::json& j);  // strict; throws Error naming the field

}  // namespace kvweld::sim
