// The op table: one Row per op kind (sim/ops.hpp), each holding when the
// kind is eligible, its one draw over an entropy source (the swarm's and
// the ops fuzzer's), and its JSON both ways. A kind without a row does not
// compile. What an op does to the engine is the simulator's
// (Simulator::run, one overload per kind).
#include "sim/op_table.hpp"

#include "sim/json_field.hpp"
#include "sim/simulator.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>

namespace kvweld::sim {

namespace {

using nlohmann::json;

// A step's output subset comes from its own seed, so the ops a seed draws
// did not change when output subsets came.
constexpr std::uint64_t kOutputsStream = 0x6f7574707574732dULL;

const std::vector<int> kOne{0};  // an op of the engine's, not of a sequence

std::vector<int> when(bool able) { return able ? kOne : std::vector<int>{}; }
bool can(const Simulator& s, std::uint32_t cap) { return (s.capabilities() & cap) != 0; }

// The open sequences whose request satisfies `ok`.
template <class F>
std::vector<int> open_where(const Simulator& s, F&& ok) {
    std::vector<int> out;
    for (int seq = 0; seq < s.config().seqs; ++seq)
        if (const auto& r = s.request(seq); r && ok(*r)) out.push_back(seq);
    return out;
}
std::vector<int> with_history(const Simulator& s) {
    return open_where(s, [](const Request& r) { return !r.history.empty(); });
}
std::vector<int> any_open(const Simulator& s) {
    return open_where(s, [](const Request&) { return true; });
}

std::vector<int> non_negative(const json& j, const char* name) {
    auto values = json_field<std::vector<int>>(j, name);
    for (int v : values) require(v >= 0, "field '", name, "' holds a negative value ", v);
    return values;
}
bool optional_flag(const json& j, const char* name) { return j.contains(name) && json_field<bool>(j, name); }

// A rewrite is written only when drawn (its seed with it).
ops::Rewrite draw_rewrite(Entropy& e) {
    ops::Rewrite r{e.chance(0.5), 0};
    if (r.on) r.seed = e.seed();
    return r;
}
void write_rewrite(json& j, const ops::Rewrite& r) {
    if (!r.on) return;
    j["rewrite"] = true;
    j["seed"] = r.seed;
}
ops::Rewrite read_rewrite(const json& j) {
    ops::Rewrite r{optional_flag(j, "rewrite"), 0};
    if (r.on) r.seed = json_field<std::uint64_t>(j, "seed");
    return r;
}

// Each sequence asks for `draw()` tokens.
template <class F>
std::vector<int> wants_for(const Simulator& s, F&& draw) {
    std::vector<int> wants(std::size_t(s.config().seqs));
    for (int& want : wants) want = draw();
    return wants;
}

template <class T>
struct Row;

template <>
struct Row<ops::Admit> {
    static std::vector<int> eligible(const Simulator& s) { return s.free_seqs(); }
    static ops::Admit draw(const Simulator& s, Entropy& e, std::uint32_t pick) {
        const SimConfig& c = s.config();
        ops::Admit a{.pick = pick};
        a.prompt.resize(std::size_t(e.range(1, c.max_prompt)));
        for (int& t : a.prompt) t = int(e.below(std::uint64_t(c.model.vocab)));
        a.max_new = int(e.range(0, c.max_new));
        a.capacity = e.pick();
        a.recycle = e.chance(0.5);
        return a;
    }
    static void write(json& j, const ops::Admit& a) {
        j.update({{"pick", a.pick}, {"prompt", a.prompt}, {"max_new", a.max_new}, {"capacity", a.capacity},
                  {"recycle", a.recycle}});
    }
    static ops::Admit read(const json& j) {
        ops::Admit a{.pick = json_field<std::uint32_t>(j, "pick"), .prompt = non_negative(j, "prompt")};
        require(!a.prompt.empty(), "field 'prompt' is empty: a request needs a prompt");
        a.max_new = json_field<int>(j, "max_new");
        require(a.max_new >= 0, "field 'max_new' = ", a.max_new, ": must be >= 0");
        a.capacity = json_field<std::uint32_t>(j, "capacity");
        a.recycle = json_field<bool>(j, "recycle");
        return a;
    }
};

template <>
struct Row<ops::Step> {
    static std::vector<int> eligible(const Simulator& s) {
        return open_where(s, [](const Request& r) { return !r.done(); });
    }
    // Each sequence takes part with its own chance and asks for 1..max_chunk
    // tokens; half the prefill chunks want their last row only, where the
    // engine can say so.
    static ops::Step draw(const Simulator& s, Entropy& e, std::uint32_t) {
        ops::Step a;
        a.wants = wants_for(s, [&] { return e.chance(0.75) ? int(e.range(1, s.config().max_chunk)) : 0; });
        a.seed = e.seed();
        a.last_only = can(s, KVWELD_CAP_OUTPUTS) && Rng(a.seed ^ kOutputsStream).chance(0.5);
        return a;
    }
    static void write(json& j, const ops::Step& a) {
        j.update({{"wants", a.wants}, {"seed", a.seed}});
        if (a.last_only) j["outputs"] = "last";
    }
    static ops::Step read(const json& j) {
        ops::Step a{.wants = non_negative(j, "wants"), .seed = json_field<std::uint64_t>(j, "seed")};
        if (j.contains("outputs")) {
            const std::string outputs = json_field<std::string>(j, "outputs");
            require(outputs == "last", "field 'outputs' = '", outputs, "': expected \"last\" (or no field: every row)");
            a.last_only = true;
        }
        return a;
    }
};

template <>
struct Row<ops::Truncate> {
    static std::vector<int> eligible(const Simulator& s) { return with_history(s); }
    static ops::Truncate draw(const Simulator&, Entropy& e, std::uint32_t pick) {
        ops::Truncate a{.pick = pick, .length = e.pick()};
        a.rewrite = draw_rewrite(e);
        return a;
    }
    static void write(json& j, const ops::Truncate& a) {
        j.update({{"pick", a.pick}, {"length", a.length}});
        write_rewrite(j, a.rewrite);
    }
    static ops::Truncate read(const json& j) {
        return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "length"), read_rewrite(j)};
    }
};

template <>
struct Row<ops::Preempt> {
    static std::vector<int> eligible(const Simulator& s) { return with_history(s); }
    static ops::Preempt draw(const Simulator&, Entropy& e, std::uint32_t pick) { return {pick, draw_rewrite(e)}; }
    static void write(json& j, const ops::Preempt& a) {
        j["pick"] = a.pick;
        write_rewrite(j, a.rewrite);
    }
    static ops::Preempt read(const json& j) { return {json_field<std::uint32_t>(j, "pick"), read_rewrite(j)}; }
};

template <>
struct Row<ops::Fork> {
    static std::vector<int> eligible(const Simulator& s) {
        return s.config().seqs > 1 ? with_history(s) : std::vector<int>{};
    }
    static ops::Fork draw(const Simulator&, Entropy& e, std::uint32_t pick) {
        ops::Fork a{.pick = pick, .to = e.pick()};
        a.onto_open = e.chance(0.3);
        return a;
    }
    static void write(json& j, const ops::Fork& a) {
        j.update({{"pick", a.pick}, {"to", a.to}});
        if (a.onto_open) j["onto_open"] = true;
    }
    static ops::Fork read(const json& j) {
        return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "to"), optional_flag(j, "onto_open")};
    }
};

template <>
struct Row<ops::Retire> {
    static std::vector<int> eligible(const Simulator& s) { return any_open(s); }
    static ops::Retire draw(const Simulator&, Entropy&, std::uint32_t pick) { return {pick}; }
    static void write(json& j, const ops::Retire& a) { j["pick"] = a.pick; }
    static ops::Retire read(const json& j) { return {json_field<std::uint32_t>(j, "pick")}; }
};

// The kinds with no argument: clear_all (every open sequence), and the
// paged pool's compact, grow and reset.
template <class T>
struct NoArgs {
    static T draw(const Simulator&, Entropy&, std::uint32_t) { return {}; }
    static void write(json&, const T&) {}
    static T read(const json&) { return {}; }
};

template <>
struct Row<ops::ClearAll> : NoArgs<ops::ClearAll> {
    static std::vector<int> eligible(const Simulator& s) { return any_open(s); }
};

template <>
struct Row<ops::Reload> {
    static std::vector<int> eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_RELOAD)); }
    static ops::Reload draw(const Simulator&, Entropy& e, std::uint32_t) {
        ops::Reload a{.same_weights = e.chance(0.5)};
        a.seed = e.seed();
        return a;
    }
    static void write(json& j, const ops::Reload& a) { j.update({{"same_weights", a.same_weights}, {"seed", a.seed}}); }
    static ops::Reload read(const json& j) {
        return {json_field<bool>(j, "same_weights"), json_field<std::uint64_t>(j, "seed")};
    }
};

template <>
struct Row<ops::SwapLayer> {
    static std::vector<int> eligible(const Simulator& s) {
        return can(s, KVWELD_CAP_SWAP_LAYER) ? any_open(s) : std::vector<int>{};
    }
    static ops::SwapLayer draw(const Simulator& s, Entropy& e, std::uint32_t pick) {
        return {pick, int(e.below(std::uint64_t(s.config().model.n_layers)))};
    }
    static void write(json& j, const ops::SwapLayer& a) { j.update({{"pick", a.pick}, {"layer", a.layer}}); }
    static ops::SwapLayer read(const json& j) {
        ops::SwapLayer a{json_field<std::uint32_t>(j, "pick"), json_field<int>(j, "layer")};
        require(a.layer >= 0, "field 'layer' = ", a.layer, ": must be >= 0");
        return a;
    }
};

template <>
struct Row<ops::Compact> : NoArgs<ops::Compact> {
    static std::vector<int> eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_POOL_OPS)); }
};

// A server grows its pool within a memory budget: here, four times what
// every sequence full would take, the pool's size as the block model has
// it (the simulator's own account), without one as the engine reports it.
template <>
struct Row<ops::Grow> : NoArgs<ops::Grow> {
    static std::vector<int> eligible(const Simulator& s) {
        if (!can(s, KVWELD_CAP_POOL_OPS)) return {};
        if (!can(s, KVWELD_CAP_BLOCKS)) return kOne;
        const int budget = 4 * std::max(s.config().seqs * s.config().n_ctx, 1);
        const BlockModel* blocks = s.block_model();
        const kvweld_pool_info info = blocks ? kvweld_pool_info{} : s.pool_info();
        const std::int64_t positions = blocks ? std::int64_t(blocks->n_blocks()) * blocks->block_size()
                                              : std::int64_t(info.n_blocks) * info.block_size;
        return when(positions < budget);
    }
};

template <>
struct Row<ops::Reset> : NoArgs<ops::Reset> {
    static std::vector<int> eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_POOL_OPS)); }
};

template <>
struct Row<ops::Invalid> {
    static std::vector<int> eligible(const Simulator& s) { return any_open(s); }
    static ops::Invalid draw(const Simulator&, Entropy& e, std::uint32_t pick) {
        ops::Invalid a{.pick = pick, .call = e.pick()};
        a.seed = e.seed();
        return a;
    }
    static void write(json& j, const ops::Invalid& a) {
        j.update({{"pick", a.pick}, {"call", a.call}, {"seed", a.seed}});
    }
    static ops::Invalid read(const json& j) {
        return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "call"),
                json_field<std::uint64_t>(j, "seed")};
    }
};

template <>
struct Row<ops::Migrate> {
    static std::vector<int> eligible(const Simulator& s) {
        return s.white_box() && !s.free_seqs().empty() ? any_open(s) : std::vector<int>{};
    }
    static ops::Migrate draw(const Simulator&, Entropy& e, std::uint32_t pick) { return {pick, e.pick()}; }
    static void write(json& j, const ops::Migrate& a) { j.update({{"pick", a.pick}, {"to", a.to}}); }
    static ops::Migrate read(const json& j) {
        return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "to")};
    }
};

template <>
struct Row<ops::Lora> {
    static std::vector<int> eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_LORA)); }
    // Scales from a few values, so that a set comes back with the same
    // scales (no change), with others (step data), or at 0 (adds nothing).
    static ops::Lora draw(const Simulator&, Entropy& e, std::uint32_t) {
        ops::Lora a;
        for (int i = 0; i < kLoraPool; ++i)
            if (e.chance(0.4)) {
                a.adapters.push_back(i);
                a.scales.push_back(std::array{0.0f, 0.5f, 1.0f, 2.0f}[e.below(4)]);
            }
        return a;
    }
    static void write(json& j, const ops::Lora& a) { j.update({{"adapters", a.adapters}, {"scales", a.scales}}); }
    static ops::Lora read(const json& j) {
        ops::Lora a{non_negative(j, "adapters"), json_field<std::vector<float>>(j, "scales")};
        require(a.scales.size() == a.adapters.size(), "field 'scales' holds ", a.scales.size(), " values for ",
                a.adapters.size(), " adapters");
        for (std::size_t i = 0; i < a.adapters.size(); ++i) {
            require(a.adapters[i] < kLoraPool, "field 'adapters' holds ", a.adapters[i], ": a run has adapters 0..",
                    kLoraPool - 1);
            for (std::size_t k = 0; k < i; ++k)
                require(a.adapters[k] != a.adapters[i], "field 'adapters' holds ", a.adapters[i], " twice");
            require(std::isfinite(a.scales[i]) && std::fabs(a.scales[i]) <= 16.0f, "field 'scales' holds ",
                    a.scales[i], ": must be finite, at most 16 in size");
        }
        return a;
    }
};

template <>
struct Row<ops::Cvec> {
    static std::vector<int> eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_CVEC)); }
    // Three vectors' data, so a drawn one is often the one held, re-ranged.
    static ops::Cvec draw(const Simulator& s, Entropy& e, std::uint32_t) {
        ops::Cvec a{.clear = e.chance(0.25)};
        if (a.clear) return a;
        const int layers = s.config().model.n_layers;
        a.seed = 1 + e.below(3);
        a.start = int(e.range(1, std::max(1, layers - 1)));
        a.end = int(e.range(a.start, std::max(a.start, layers - 1)));
        return a;
    }
    static void write(json& j, const ops::Cvec& a) {
        if (a.clear) j["clear"] = true;
        else j.update({{"seed", a.seed}, {"start", a.start}, {"end", a.end}});
    }
    static ops::Cvec read(const json& j) {
        ops::Cvec a{.clear = optional_flag(j, "clear")};
        if (a.clear) return a;
        a.seed = json_field<std::uint64_t>(j, "seed");
        a.start = json_field<int>(j, "start");
        a.end = json_field<int>(j, "end");
        require(a.start >= 0 && a.end >= 0, "fields 'start' = ", a.start, " and 'end' = ", a.end, ": must be >= 0");
        return a;
    }
};

template <>
struct Row<ops::Warmup> {
    static std::vector<int> eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_WARMUP)); }
    static ops::Warmup draw(const Simulator&, Entropy& e, std::uint32_t) { return {e.chance(0.5)}; }
    static void write(json& j, const ops::Warmup& a) { j["on"] = a.on; }
    static ops::Warmup read(const json& j) { return {json_field<bool>(j, "on")}; }
};

// A server shifts a context that is full; the simulator's requests are
// short (a shift at any length moves rows the same way), and a full one
// waits for a shift with its next token parked.
template <>
struct Row<ops::Shift> {
    static std::vector<int> eligible(const Simulator& s) {
        if (!can(s, KVWELD_CAP_SHIFT)) return {};
        return open_where(s, [](const Request& r) { return r.history.size() >= 2; });
    }
    // Half keep a prefix (llama-server's n_keep), half none.
    static ops::Shift draw(const Simulator&, Entropy& e, std::uint32_t pick) {
        ops::Shift a{.pick = pick};
        a.keep = e.chance(0.5) ? 0 : e.pick();
        a.discard = e.pick();
        a.twice = e.chance(0.5);
        return a;
    }
    static void write(json& j, const ops::Shift& a) {
        j.update({{"pick", a.pick}, {"keep", a.keep}, {"discard", a.discard}});
        if (a.twice) j["twice"] = true;
    }
    static ops::Shift read(const json& j) {
        return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "keep"),
                json_field<std::uint32_t>(j, "discard"), optional_flag(j, "twice")};
    }
};

template <>
struct Row<ops::Save> {
    static std::vector<int> eligible(const Simulator& s) {
        return can(s, KVWELD_CAP_STATE) ? with_history(s) : std::vector<int>{};
    }
    static ops::Save draw(const Simulator&, Entropy&, std::uint32_t pick) { return {pick}; }
    static void write(json& j, const ops::Save& a) { j["pick"] = a.pick; }
    static ops::Save read(const json& j) { return {json_field<std::uint32_t>(j, "pick")}; }
};

// A saved state to load, and somewhere to load it.
template <>
struct Row<ops::Load> {
    static std::vector<int> eligible(const Simulator& s) {
        return when(can(s, KVWELD_CAP_STATE) && s.saved_states() > 0);
    }
    static ops::Load draw(const Simulator&, Entropy& e, std::uint32_t pick) {
        ops::Load a{.state = pick, .to = e.pick()};
        a.onto_open = e.chance(0.4);
        return a;
    }
    static void write(json& j, const ops::Load& a) {
        j.update({{"state", a.state}, {"to", a.to}});
        if (a.onto_open) j["onto_open"] = true;
    }
    static ops::Load read(const json& j) {
        return {json_field<std::uint32_t>(j, "state"), json_field<std::uint32_t>(j, "to"), optional_flag(j, "onto_open")};
    }
};

template <>
struct Row<ops::Steady> {
    static std::vector<int> eligible(const Simulator& s) { return Row<ops::Step>::eligible(s); }
    // Every sequence decoding asks the same: 1 (plain decode) or 1 + drafts.
    static ops::Steady draw(const Simulator& s, Entropy& e, std::uint32_t) {
        ops::Steady a;
        const int k = e.chance(0.5) ? 1 : int(e.range(1, std::min(8, s.config().max_chunk)));
        a.wants = wants_for(s, [&] { return e.chance(0.9) ? k : 0; });
        a.seed = e.seed();
        a.steps = std::uint32_t(e.range(8, 64));
        return a;
    }
    static void write(json& j, const ops::Steady& a) {
        j.update({{"wants", a.wants}, {"seed", a.seed}, {"steps", a.steps}});
    }
    static ops::Steady read(const json& j) {
        ops::Steady a{non_negative(j, "wants"), json_field<std::uint64_t>(j, "seed"), json_field<std::uint32_t>(j, "steps")};
        require(a.steps >= 1 && a.steps <= std::uint32_t(kMaxSteadySteps), "field 'steps' = ", a.steps,
                ": must be in 1..", kMaxSteadySteps);
        return a;
    }
};

// One of the live settings the engine (and a peer) lists, at one of its values.
template <>
struct Row<ops::Live> {
    static std::vector<int> eligible(const Simulator& s) { return when(!s.live_settings().empty()); }
    static ops::Live draw(const Simulator& s, Entropy& e, std::uint32_t) {
        const auto& settings = s.live_settings();
        const abi::LiveSetting& setting = settings[e.below(settings.size())];
        return {setting.key, setting.values[e.below(setting.values.size())]};
    }
    static void write(json& j, const ops::Live& a) { j.update({{"key", a.key}, {"value", a.value}}); }
    static ops::Live read(const json& j) {
        ops::Live a{json_field<std::string>(j, "key"), json_field<std::string>(j, "value")};
        require(!a.key.empty(), "field 'key' is empty: a live setting needs a name");
        return a;
    }
};

// A sampler chain for a sequence id: cleared a quarter of the time, else
// greedy or a narrow top-k, sometimes changed in place.
template <>
struct Row<ops::SetSampler> {
    static std::vector<int> eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_SAMPLERS)); }
    static ops::SetSampler draw(const Simulator& s, Entropy& e, std::uint32_t) {
        ops::SetSampler a;
        a.seq = std::uint32_t(e.below(std::size_t(s.config().seqs)));
        a.top_k = e.chance(0.25) ? -1 : e.chance(0.45) ? 0 : int(e.range(1, 8));
        a.seed = std::uint32_t(e.seed());
        a.in_place = e.chance(0.1);
        return a;
    }
    static void write(json& j, const ops::SetSampler& a) {
        j.update({{"seq", a.seq}, {"top_k", a.top_k}, {"seed", a.seed}, {"in_place", a.in_place}});
    }
    static ops::SetSampler read(const json& j) {
        ops::SetSampler a{json_field<std::uint32_t>(j, "seq"), json_field<int>(j, "top_k"),
                          json_field<std::uint32_t>(j, "seed"), optional_flag(j, "in_place")};
        require(a.top_k >= -1 && a.top_k <= kMaxTopK, "field 'top_k' = ", a.top_k, ": must be -1 (clear), 0 (greedy) or 1..",
                kMaxTopK);
        return a;
    }
};

// Half the stops come early (in kvweld's engine, within the first tokens;
// in llama.cpp, within the first ubatch's graph), half anywhere up to a
// few thousand questions (a late one lets the call run to its end). Not
// with a peer: its engine asks its own questions.
template <>
struct Row<ops::Abort> {
    static constexpr std::uint32_t kMaxAfter = 1u << 16;
    static std::vector<int> eligible(const Simulator& s) {
        return when(can(s, KVWELD_CAP_ABORT) && !s.config().engine.peer);
    }
    static ops::Abort draw(const Simulator&, Entropy& e, std::uint32_t) {
        const std::uint64_t width = e.chance(0.5) ? 8 : std::uint64_t(1) << e.range(3, 12);
        return {std::uint32_t(e.below(width))};
    }
    static void write(json& j, const ops::Abort& a) { j["after"] = a.after; }
    static ops::Abort read(const json& j) {
        ops::Abort a{json_field<std::uint32_t>(j, "after")};
        require(a.after <= kMaxAfter, "field 'after' = ", a.after, ": must be at most ", kMaxAfter);
        return a;
    }
};

// The table's generic face: kind k's row is the k-th alternative's.
template <std::size_t... I>
constexpr auto make_names(std::index_sequence<I...>) {
    return std::array<std::string_view, sizeof...(I)>{std::variant_alternative_t<I, OpArgs>::name...};
}
constexpr auto kNames = make_names(std::make_index_sequence<kOpKinds>{});

template <std::size_t I = 0, class F>
decltype(auto) with_kind(OpKind kind, F&& f) {
    if constexpr (I + 1 < std::size_t(kOpKinds)) {
        if (std::size_t(kind) != I) return with_kind<I + 1>(kind, std::forward<F>(f));
    }
    return f(std::type_identity<std::variant_alternative_t<I, OpArgs>>{});
}

}  // namespace

std::string_view to_string(OpKind k) {
    require(std::size_t(k) < kNames.size(), "op kind ", int(k), " out of range");
    return kNames[std::size_t(k)];
}

OpKind op_kind_from_string(std::string_view s) {
    for (std::size_t k = 0; k < kNames.size(); ++k)
        if (kNames[k] == s) return OpKind(k);
    std::string known;
    for (std::string_view name : kNames) known += cat(known.empty() ? "" : ", ", name);
    throw Error(cat("unknown op '", s, "' (known: ", known, ")"));
}

std::uint32_t Op::pick() const {
    return std::visit(
        [](const auto& a) -> std::uint32_t {
            if constexpr (requires { a.pick; }) return a.pick;
            else return 0;
        },
        args);
}

void to_json(nlohmann::json& j, const Op& op) {
    j = nlohmann::json::object();
    j["op"] = to_string(op.kind());
    std::visit([&](const auto& a) { Row<std::decay_t<decltype(a)>>::write(j, a); }, op.args);
}

Op op_from_json(const nlohmann::json& j) {
    require(j.is_object(), "an op must be a JSON object");
    const OpKind kind = op_kind_from_string(json_field<std::string>(j, "op"));
    return with_kind(kind, [&](auto type) { return Op{Row<typename decltype(type)::type>::read(j)}; });
}

std::vector<int> eligible_for(const Simulator& sim, OpKind kind) {
    return with_kind(kind, [&](auto type) { return Row<typename decltype(type)::type>::eligible(sim); });
}

// Which kinds can act now, weighted by the config; none: retire one. The
// pick is drawn for every kind (a kind that picks nothing drops it), so
// each seed's draws stay in the order they always had.
Op draw_op(const Simulator& sim, Entropy& entropy) {
    std::array<int, kOpKinds> w{};
    for (int k = 0; k < kOpKinds; ++k) w[std::size_t(k)] = sim.eligible(OpKind(k)).empty() ? 0 : sim.config().weights[std::size_t(k)];
    const OpKind kind = OpKind(entropy.weighted(w).value_or(int(OpKind::retire)));
    const std::uint32_t pick = entropy.pick();
    return with_kind(kind, [&](auto type) { return Op{Row<typename decltype(type)::type>::draw(sim, entropy, pick)}; });
}

}  // namespace kvweld::sim
