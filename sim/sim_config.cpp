#include "sim/sim_config.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "targets/registry.hpp"
#include "kvweld/engine_abi.h"
#include "sim/json_field.hpp"
#include "sim/model_json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace kvweld::sim {

std::string build_of(const std::string& engine) {
    try {
        return targets::engine_build(engine);
    } catch (const Error&) {
        return "";
    }
}

namespace {

// Engines behind the ABI load llama-family weights (GGUF or llama2.c); one
// in process takes every family.
std::vector<std::string_view> model_names(bool in_process) {
    std::vector<std::string_view> out;
    for (std::string_view name : swarm_model_names())
        if (in_process || config_by_name(name).family == Family::llama) out.push_back(name);
    return out;
}

void apply_fixed_shape(SimConfig& c, const EngineChoice& e) {
    if (e.seqs) {
        require(e.seqs >= 1 && e.seqs <= 256, "--seqs ", e.seqs, ": must be in 1..256");
        c.seqs = e.seqs;
    }
    if (e.n_ctx) {
        const int ctx_max = std::min(c.model.max_seq_len, kMaxDrawnCtx);
        require(e.n_ctx >= 2 && e.n_ctx <= ctx_max, "--n-ctx ", e.n_ctx, ": must be in 2..", ctx_max, " for model ",
                c.model_name);
        c.n_ctx = e.n_ctx;
        c.max_prompt = std::min(c.max_prompt, c.n_ctx - 1);
    }
}

constexpr std::uint64_t kMoeStream = 0x6d6978747572652dULL;

// A mixture of experts, where the engine loads one: a quarter of the seeds
// decode the "tiny" dims with experts instead of the model drawn, and most
// of those switch warmup. Drawn on a stream of their own (the seed's other
// draws did not change when MoE came; the seeds it picks decode another
// model now), every draw made whatever is used, so that a reproduce command
// that names the model draws the same warmup weight.
struct MoeDraw {
    bool moe, warmup;
    int weight;
};
MoeDraw draw_moe(std::uint64_t seed) {
    Rng rng(seed ^ kMoeStream);
    const bool moe = rng.chance(0.25), warmup = rng.chance(0.75);
    return {moe, warmup, int(rng.range(1, 20))};
}

constexpr std::uint64_t kPeerStream = 0x706565722d736574ULL;

// A peer's settings: where it shares a registry entry with the first engine
// (two releases of llama.cpp, kvweld against itself), the keys both leave
// open are drawn from the same stream state, so both run the same settings.
std::string draw_peer_settings(const SimConfig& c, const Rng& settings_rng) {
    const PeerChoice& p = *c.engine.peer;
    EngineSetup setup = c.setup();
    setup.params = p.params;
    const bool shared = engine_entry(p.engine) && engine_entry(p.engine) == engine_entry(c.engine.engine);
    Rng rng = shared ? settings_rng : Rng(c.seed ^ kPeerStream);
    return draw_engine_settings(p.engine, setup, rng);
}

constexpr std::uint64_t kStateStream = 0x73746174652d6f70ULL;
constexpr std::uint64_t kLiveStream = 0x6c6976652d6f7073ULL;
constexpr std::uint64_t kSamplerStream = 0x73616d706c65722dULL;
constexpr std::uint64_t kAbortStream = 0x61626f72742d6f70ULL;
constexpr std::uint64_t kKeepStream = 0x6b6565702d6f7073ULL;

// Context shifts, state save and load, and steady phases, where the engine
// does them: on a stream of their own too (seeds drew the same ops as
// before where these are off), each on about half the seeds.
void draw_state_ops(SimConfig& c, std::uint32_t capabilities) {
    Rng rng(c.seed ^ kStateStream);
    const auto weight = [&](bool able) {
        const int w = int(rng.range(1, 12));  // both drawn whatever is used: the stream stays aligned
        const bool on = rng.chance(0.5);
        return able && on ? w : 0;
    };
    c.weights[int(OpKind::shift)] = weight(capabilities & KVWELD_CAP_SHIFT);
    const int state = weight(capabilities & KVWELD_CAP_STATE);
    c.weights[int(OpKind::save)] = state;
    c.weights[int(OpKind::load)] = state;
    c.weights[int(OpKind::steady)] = weight(true) / 3;
}

// Live settings (ABI 9), where the engine (and a peer) lists some: on a
// stream of their own, on about two seeds in three (three settings share them).
void draw_live_ops(SimConfig& c) {
    Rng rng(c.seed ^ kLiveStream);
    const int w = int(rng.range(2, 12));
    const bool on = rng.chance(0.67);
    const bool listed = !engine_live_settings(c.engine.engine).empty() &&
                        (!c.engine.peer || !engine_live_settings(c.engine.peer->engine).empty());
    c.weights[int(OpKind::live)] = listed && on ? w : 0;
}

// Backend samplers (ABI 11), where the engine (and a peer) has them: on a
// stream of their own, on about half the seeds.
void draw_sampler_ops(SimConfig& c, std::uint32_t capabilities) {
    Rng rng(c.seed ^ kSamplerStream);
    const int w = int(rng.range(1, 10));
    const bool on = rng.chance(0.5);
    c.weights[int(OpKind::sampler)] = (capabilities & KVWELD_CAP_SAMPLERS) && on ? w : 0;
}

// The abort callback (ABI 12), where the engine has one and no peer runs
// beside it: on a stream of its own, on about a third of the seeds, rare
// where on (a server aborts a call seldom).
void draw_abort_ops(SimConfig& c, std::uint32_t capabilities) {
    Rng rng(c.seed ^ kAbortStream);
    const int w = int(rng.range(1, 6));
    const bool on = rng.chance(0.35);
    c.weights[int(OpKind::abort)] = (capabilities & KVWELD_CAP_ABORT) && !c.engine.peer && on ? w : 0;
}

// Keep (ABI 14), where the engine has it: on a stream of its own, on about
// a third of the seeds, rare where on (it empties every other sequence).
void draw_keep_ops(SimConfig& c, std::uint32_t capabilities) {
    Rng rng(c.seed ^ kKeepStream);
    const int w = int(rng.range(1, 4));
    const bool on = rng.chance(0.35);
    c.weights[int(OpKind::keep)] = (capabilities & KVWELD_CAP_KEEP) && on ? w : 0;
}

}  // namespace

std::uint32_t choice_capabilities(const EngineChoice& engine) {
    const std::uint32_t first = engine_capabilities(engine.engine);
    return engine.peer ? first & engine_capabilities(engine.peer->engine) : first;
}

SimConfig draw_config(std::uint64_t seed, const EngineChoice& engine, const std::string& model,
                              std::uint32_t capabilities) {
    Rng rng(seed);
    SimConfig c;
    c.seed = seed;
    c.engine = engine;
    // The kinds before lora, drawn first as they always were, so a seed's
    // config did not change when the adapter ops came.
    for (int k = 0; k < int(OpKind::lora); ++k) c.weights[k] = rng.chance(0.6) ? int(rng.range(1, 100)) : 0;
    // Without admit and step nothing is decoded; clear_all is rare by nature.
    c.weights[int(OpKind::admit)] = int(rng.range(10, 60));
    c.weights[int(OpKind::step)] = int(rng.range(60, 100));
    for (OpKind rare : {OpKind::clear_all, OpKind::reload, OpKind::grow, OpKind::reset})
        c.weights[int(rare)] = std::min(c.weights[int(rare)], 3);
    c.weights[int(OpKind::invalid)] = std::min(c.weights[int(OpKind::invalid)], 10);
    if (!(capabilities & KVWELD_CAP_COPY_SEQ)) c.weights[int(OpKind::fork)] = 0;
    if (!(capabilities & KVWELD_CAP_RELOAD)) c.weights[int(OpKind::reload)] = 0;
    if (!(capabilities & KVWELD_CAP_SWAP_LAYER)) c.weights[int(OpKind::swap_layer)] = 0;
    // A diff compares two engines through the one interface they share: no white box.
    const bool white_box = engine_in_process(engine.engine) && !engine.peer;
    if (!white_box) c.weights[int(OpKind::migrate)] = 0;
    if (!(capabilities & KVWELD_CAP_POOL_OPS))
        for (OpKind pool_op : {OpKind::compact, OpKind::grow, OpKind::reset}) c.weights[int(pool_op)] = 0;
    c.seqs = int(rng.range(1, 16));
    c.sampled = rng.chance(0.5);
    const std::vector<std::string_view> models = model_names(white_box);
    c.model_name = std::string(models[rng.below(models.size())]);
    const MoeDraw moe = draw_moe(seed);
    if (moe.moe && (capabilities & KVWELD_CAP_MOE)) c.model_name = "tiny-moe";  // before the shape drawn from it
    if (!model.empty()) c.model_name = model;
    c.model = config_by_name(c.model_name);
    c.weights_seed = rng.next();
    c.max_prompt = int(rng.range(1, 24));
    c.max_new = int(rng.range(0, 40));
    c.max_chunk = int(rng.range(1, 48));  // several dozen tokens per sequence per call
    c.accept_mean = static_cast<float>(rng.unit());
    const int ctx_max = std::min(c.model.max_seq_len, kMaxDrawnCtx);
    c.n_ctx = int(rng.range(std::min(ctx_max, c.max_prompt + 1), ctx_max));
    apply_fixed_shape(c, engine);
    const Rng settings_rng = rng;
    c.engine.params = draw_engine_settings(c.engine.engine, c.setup(), rng);
    if (c.engine.peer) c.engine.peer->params = draw_peer_settings(c, settings_rng);
    // White box: one to three capacities a fresh sequence may get, each the
    // whole n_ctx or less (a plan cannot be rebound across capacities).
    if (white_box)
        for (int i = 0, n = int(rng.range(1, 3)); i < n; ++i)
            c.capacities.push_back(rng.chance(0.5) ? c.n_ctx : int(rng.range(std::min(c.n_ctx, c.max_prompt + 1), c.n_ctx)));
    // LoRA adapters and a control vector, where the engine takes them.
    for (const auto& [k, cap] : {std::pair{OpKind::lora, KVWELD_CAP_LORA}, std::pair{OpKind::cvec, KVWELD_CAP_CVEC}})
        c.weights[int(k)] = (capabilities & cap) && rng.chance(0.6) ? int(rng.range(1, 20)) : 0;
    c.weights[int(OpKind::warmup)] = c.model.moe() && (capabilities & KVWELD_CAP_WARMUP) && moe.warmup ? moe.weight : 0;
    draw_state_ops(c, capabilities);
    draw_live_ops(c);
    draw_sampler_ops(c, capabilities);
    draw_abort_ops(c, capabilities);
    draw_keep_ops(c, capabilities);
    return c;
}

std::string SimConfig::capacities_text() const {
    std::string out;
    for (int cap : capacities) out += cat(out.empty() ? "" : " ", cap);
    return out;
}

namespace {
std::string peer_line(const PeerChoice& p) {
    const std::string build = build_of(p.engine);
    return cat("  peer (kvweld diff): ", p.engine, build.empty() ? "" : cat(" (", build, ")"),
               " params=", p.params.empty() ? "(defaults)" : p.params, " faults=", p.faults.empty() ? "none" : p.faults,
               " tolerance=", p.tolerance, "\n");
}
}  // namespace

std::string SimConfig::describe() const {
    std::string ops;
    for (int k = 0; k < kOpKinds; ++k)
        if (weights[k]) ops += cat(ops.empty() ? "" : " ", to_string(OpKind(k)), "=", weights[k]);
    const std::string build = build_of(engine.engine);
    return cat("  engine: ", engine.engine, build.empty() ? "" : cat(" (", build, ")"),
               " params=", engine.params.empty() ? "(defaults)" : engine.params,
               " faults=", engine.faults.empty() ? "none" : engine.faults, engine.twin ? " twin=on" : "", "\n",
               engine.peer ? peer_line(*engine.peer) : "",
               "  ops: ", ops, "\n",
               "  sequences=", seqs, " n_ctx=", n_ctx, capacities.empty() ? "" : cat(" capacities=", capacities_text()),
               " tokens=", sampled ? "sampled" : "greedy", "\n",
               "  model: ", model_name, " (", model.describe(), ")\n",
               "  prompt=1..", max_prompt, " new=0..", max_new, " chunk=1..", max_chunk,
               " accept_mean=", accept_mean);
}

void to_json(nlohmann::json& j, const SimConfig& c) {
    nlohmann::json weights = nlohmann::json::object();
    for (int k = 0; k < kOpKinds; ++k) weights[std::string(to_string(OpKind(k)))] = c.weights[k];
    j = {{"seed", c.seed},
         {"engine",
          {{"name", c.engine.engine},
           {"build", build_of(c.engine.engine)},
           {"params", c.engine.params},
           {"faults", c.engine.faults},
           {"twin", c.engine.twin}}},
         {"weights", weights},
         {"seqs", c.seqs},
         {"n_ctx", c.n_ctx},
         {"sampled", c.sampled},
         {"model", model_to_json(c.model_name, c.model, c.weights_seed)},
         {"max_prompt", c.max_prompt},
         {"max_new", c.max_new},
         {"max_chunk", c.max_chunk},
         {"accept_mean", c.accept_mean},
         {"capacities", c.capacities}};
    // What the command line fixed, for the reproduce command (absent: drawn).
    if (c.engine.seqs) j["engine"]["fixed_seqs"] = c.engine.seqs;
    if (c.engine.n_ctx) j["engine"]["fixed_n_ctx"] = c.engine.n_ctx;
    if (const auto& p = c.engine.peer)
        j["engine"]["peer"] = {{"name", p->engine}, {"build", build_of(p->engine)}, {"params", p->params},
                               {"faults", p->faults}, {"tolerance", p->tolerance}};
}

SimConfig config_from_json(const nlohmann::json& j) {
    SimConfig c;
    c.seed = json_field<std::uint64_t>(j, "seed");
    const nlohmann::json& e = j.contains("engine") ? j.at("engine") : nlohmann::json();
    c.engine = {json_field<std::string>(e, "name"), json_field<std::string>(e, "params"),
                json_field<std::string>(e, "faults"), e.contains("fixed_seqs") ? json_int_in(e, "fixed_seqs", 1, 256) : 0,
                e.contains("fixed_n_ctx") ? json_int_in(e, "fixed_n_ctx", 2, 4096) : 0, json_field<bool>(e, "twin")};
    if (e.contains("peer")) {
        const nlohmann::json& p = e.at("peer");
        c.engine.peer = PeerChoice{json_field<std::string>(p, "name"), json_field<std::string>(p, "params"),
                                   json_field<std::string>(p, "faults"), json_field<double>(p, "tolerance")};
        require(std::isfinite(c.engine.peer->tolerance) && c.engine.peer->tolerance >= 0,
                "field 'peer.tolerance' = ", c.engine.peer->tolerance, ": must be finite and >= 0");
    }
    const nlohmann::json& w = j.contains("weights") ? j.at("weights") : nlohmann::json();
    for (int k = 0; k < kOpKinds; ++k) {
        // A kind a trace does not name was never drawn (lora and cvec came later).
        const std::string name(to_string(OpKind(k)));
        c.weights[k] = w.contains(name) ? json_int_in(w, name.c_str(), 0, 100) : 0;
    }
    require(c.weights[int(OpKind::admit)] > 0 && c.weights[int(OpKind::step)] > 0,
            "weights: admit and step must be enabled");
    c.seqs = json_int_in(j, "seqs", 1, 256);
    c.sampled = json_field<bool>(j, "sampled");
    const nlohmann::json& m = j.contains("model") ? j.at("model") : nlohmann::json();
    c.model_name = json_field<std::string>(m, "name");
    c.model = model_from_json(m);
    c.weights_seed = json_field<std::uint64_t>(m, "weights_seed");
    c.n_ctx = json_int_in(j, "n_ctx", 1, c.model.max_seq_len);
    c.max_prompt = json_int_in(j, "max_prompt", 1, 4096);
    c.max_new = json_int_in(j, "max_new", 0, 1 << 20);
    c.max_chunk = json_int_in(j, "max_chunk", 1, 512);
    c.accept_mean = json_field<float>(j, "accept_mean");
    require(c.accept_mean >= 0.0f && c.accept_mean <= 1.0f, "field 'accept_mean' = ", c.accept_mean,
            ": must be in [0, 1]");
    c.capacities = json_field<std::vector<int>>(j, "capacities");
    require(c.capacities.size() <= 16, "field 'capacities' holds ", c.capacities.size(), " values: at most 16");
    for (int cap : c.capacities)
        require(cap >= 1 && cap <= c.n_ctx, "field 'capacities' holds ", cap, ": must be in 1..n_ctx = ", c.n_ctx);
    return c;
}

}  // namespace kvweld::sim
