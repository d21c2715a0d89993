#include "sim/sim_config.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "targets/registry.hpp"
#include "kvweld/engine_abi.h"
#include "sim/json_field.hpp"
#include "sim/model_json.hpp"
#include "sim/ops/weight_site.hpp"

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

// The weights of kinds first..last-1, each by its own rule
// (sim/ops/<name>.cpp), in OpKind's order.
template <std::size_t I = 0>
void weigh(SimConfig& c, WeightSite site, const std::array<int, kOpKinds>& firsts, int first, int last) {
    if constexpr (I < std::size_t(kOpKinds)) {
        if (int(I) >= first && int(I) < last) {
            site.first = firsts[I];
            c.weights[I] = std::variant_alternative_t<I, OpArgs>::weight(site);
        }
        weigh<I + 1>(c, site, firsts, first, last);
    }
}

}  // namespace

MoeDraw draw_moe(std::uint64_t seed) {
    constexpr std::uint64_t kMoeStream = 0x6d6978747572652dULL;
    Rng rng(seed ^ kMoeStream);
    const bool moe = rng.chance(0.25), warmup = rng.chance(0.75);
    return {moe, warmup, int(rng.range(1, 20))};
}

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
    // The kinds before lora draw first, as they always did, so a seed's
    // config did not change when the adapter ops came; then their rules.
    std::array<int, kOpKinds> firsts{};
    for (int k = 0; k < int(OpKind::lora); ++k) firsts[std::size_t(k)] = rng.chance(0.6) ? int(rng.range(1, 100)) : 0;
    // A diff compares two engines through the one interface they share: no white box.
    const bool white_box = engine_in_process(engine.engine) && !engine.peer;
    const WeightSite site{c, capabilities, white_box, 0, rng};
    weigh(c, site, firsts, 0, int(OpKind::lora));
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
    weigh(c, site, firsts, int(OpKind::lora), kOpKinds);
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
