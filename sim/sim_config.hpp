// One run's configuration, drawn per seed (swarm testing): which ops and
// how often, how many sequences and how
// many positions each, which model, prompt and output lengths, chunked
// prefill and speculative decoding. The engine, its settings and its fault
// switches come from the command line and are recorded with the rest.
#pragma once

#include "engine/config.hpp"
#include "targets/engine.hpp"
#include "targets/registry.hpp"
#include "sim/ops.hpp"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::sim {

// The simulator drives engines through targets/: their types are its own.
using namespace kvweld::targets;

// kvweld diff: a second engine driven in lockstep with the first (the same
// ops and tokens); its rows and each call's reuse are compared with the
// first engine's, and no other oracle runs.
struct PeerChoice {
    std::string engine;  // a built-in name or a plugin's path
    std::string params;  // its settings; keys left open are drawn as the first engine's are, where both share an entry
    std::string faults;
    double tolerance = 1e-4;  // logit_error past which two rows differ
};

// What the command line fixes for every seed; the rest is drawn per seed.
struct EngineChoice {
    std::string engine{kDefaultEngine};  // a built-in name or a plugin's path
    std::string params;             // the engine's settings, "k=v,..."; keys not given may be drawn
    std::string faults;             // its fault switches, "a,b"
    int seqs = 0;                   // sequences open at once (0: drawn)
    int n_ctx = 0;                  // positions per sequence (0: drawn)
    bool twin = false;              // run the differential twin (the engine with plan reuse off)
    std::optional<PeerChoice> peer = std::nullopt;  // kvweld diff's second engine
    targets::Isolation isolation = {};  // where a plugin runs (--isolate, --call-timeout); no part of a trace
};

// Which build of the engine runs ("" when it names none or cannot be
// opened: the error comes where a run opens it).
std::string build_of(const std::string& engine);

// The capabilities a run may use: the engine's, and with a peer only those
// both declare (an op one of them cannot do is never drawn).
std::uint32_t choice_capabilities(const EngineChoice& engine);

struct SimConfig {
    std::uint64_t seed = 0;
    EngineChoice engine;
    std::array<int, kOpKinds> weights{};  // 0 = disabled, else 1..100
    int seqs = 1;    // sequences open at once: 1..16 when drawn
    int n_ctx = 64;  // positions per sequence
    bool sampled = false;
    std::string model_name = "tiny";
    ModelConfig model;
    std::uint64_t weights_seed = 1;
    int max_prompt = 8;   // prompts are 1..max_prompt tokens
    int max_new = 16;     // output budgets are 0..max_new tokens
    int max_chunk = 8;    // tokens a sequence may feed per step: prefill chunk, or 1 + drafts
    float accept_mean = 0.5f;
    // White box (an engine in process): the capacities a fresh sequence may
    // be opened with, each in max_prompt+1..n_ctx (empty: n_ctx only).
    std::vector<int> capacities;

    std::string describe() const;
    std::string capacities_text() const;
    // What the engine, its rule and its block model are opened with.
    EngineSetup setup() const { return {engine.params, seqs, n_ctx, 1, engine.isolation}; }
};

// The most positions per sequence a drawn config asks for: llama.cpp pads
// its attention window to 256 cells, so up to here the window is a
// sequence's whole stream and the accounting rule can predict reuse exactly.
inline constexpr int kMaxDrawnCtx = 256;

// `capabilities` (KVWELD_CAP_*): fork, reload and swap_layer are drawn only
// when the engine declares copy_seq, reload and swap_layer. The engine's
// settings not given in engine.params are drawn per seed where the engine
// has any (llamacpp: kv_unified, graph_reuse; kvweld-paged: block, blocks).
// engine.seqs and engine.n_ctx, when set, replace the drawn values (checked:
// an Error names a value out of range).
SimConfig draw_config(std::uint64_t seed, const EngineChoice& engine, const std::string& model,
                              std::uint32_t capabilities);

void to_json(nlohmann::json& j, const SimConfig& c);
SimConfig config_from_json(const nlohmann::json& j);  // strict; throws Error naming the field

}  // namespace kvweld::sim
