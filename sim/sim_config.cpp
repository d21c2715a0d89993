#include "sim/sim_config.hpp"

#include "engine/cat.hpp"
#include "engine/enum_names.hpp"
#include "engine/error.hpp"
#include "engine/model.hpp"
#include "engine/rng.hpp"

#include "sim/json_field.hpp"

#include <nlohmann/json.hpp>

#include <array>

namespace kvweld::sim {

namespace {

constexpr NameTable<CachePolicy, 3> kCachePolicies{
    {{CachePolicy::fresh, "fresh"}, {CachePolicy::recycle, "recycle"}, {CachePolicy::mixed, "mixed"}}};

CachePolicy cache_policy_from_string(std::string_view s) { return parse_in(kCachePolicies, s, "cache policy"); }

}  // namespace

SimConfig draw_config(std::uint64_t seed, const DrawOptions& options) {
    Rng rng(seed);
    SimConfig c;
    c.seed = seed;
    // A random subset of op kinds, each weighted 1..100. admit and decode are
    // always on: without them no decode would ever be checked.
    for (int k = 0; k < kOpKinds; ++k) c.weights[k] = rng.chance(0.6) ? int(rng.range(1, 100)) : 0;
    for (OpKind k : {OpKind::admit, OpKind::decode})
        if (c.weights[int(k)] == 0) c.weights[int(k)] = int(rng.range(1, 100));
    c.slots = int(rng.range(1, 16));
    c.cache_policy = static_cast<CachePolicy>(rng.below(3));
    c.rebind_policy = rng.chance(0.5) ? RebindPolicy::rebind : RebindPolicy::rebuild;
    c.retire_keeps_cache = rng.chance(0.7);
    c.sampled = rng.chance(0.5);
    // Always drawn, then overridden: naming the drawn model reproduces the
    // same config, so a reproduce command may always say --model.
    const std::vector<std::string_view> models = swarm_model_names();
    c.model_name = std::string(models[rng.below(models.size())]);
    if (!options.model.empty()) c.model_name = options.model;
    c.model = config_by_name(c.model_name);
    c.weights_seed = rng.next();
    c.max_prompt = int(rng.range(1, 24));
    c.max_new = int(rng.range(0, 48));
    c.spec_k = int(rng.range(1, 8));
    c.accept_mean = static_cast<float>(rng.unit());
    c.same_weights_chance = static_cast<float>(rng.unit());
    c.backend = options.backend;
    c.faults = options.faults;
    // Drawn last, so every field above is what it was before capacities existed.
    const int n_capacities = int(rng.range(1, 3));
    for (int i = 0; i < n_capacities; ++i)
        c.capacities.push_back(rng.chance(0.5) ? c.model.max_seq_len
                                               : int(rng.range(c.max_prompt + 1, c.model.max_seq_len)));
    c.paged = draws_paged(seed, options);
    return c;
}

bool draws_paged(std::uint64_t seed, const DrawOptions& options) {
    constexpr std::uint64_t kDesignStream = 0x7061676564ULL;  // "paged"
    if (!options.faults.empty() || options.backend != Backend::cpu) return false;
    if (!options.model.empty() && config_by_name(options.model).family != Family::llama) return false;
    Rng rng(seed ^ kDesignStream);
    return rng.chance(0.25);
}

namespace {

std::string capacities_text(const std::vector<int>& capacities) {
    std::string out;
    for (int c : capacities) out += cat(out.empty() ? "" : " ", c);
    return out;
}

}  // namespace

std::string_view to_string(CachePolicy p) { return name_in(kCachePolicies, p); }

std::string SimConfig::describe() const {
    std::string ops;
    for (int k = 0; k < kOpKinds; ++k)
        if (weights[k]) ops += cat(ops.empty() ? "" : " ", to_string(OpKind(k)), "=", weights[k]);
    if (paged)
        return "  design: paged KV (kvweld's paged engine through the serving simulator: kvweld sim --seed S shows "
               "its configuration)";
    return cat("  ops: ", ops, "\n",
               "  slots=", slots, " cache=", to_string(cache_policy), " on_alloc_change=",
               to_string(rebind_policy), " retire_keeps_cache=", retire_keeps_cache ? "yes" : "no",
               " tokens=", sampled ? "sampled" : "greedy", "\n",
               "  model: ", model_name, " (", model.describe(), ")\n",
               "  cache capacities: ", capacities_text(capacities), "\n",
               "  prompt=1..", max_prompt, " new=0..", max_new, " spec_k=", spec_k,
               " accept_mean=", accept_mean, " reload_same_weights=", same_weights_chance, "\n",
               "  backend=", to_string(backend), " faults=", faults.describe());
}

void to_json(nlohmann::json& j, const SimConfig& c) {
    nlohmann::json weights = nlohmann::json::object();
    for (int k = 0; k < kOpKinds; ++k) weights[std::string(to_string(OpKind(k)))] = c.weights[k];
    std::vector<std::string> faults;
    for (const FaultInfo& f : all_faults())
        if (c.faults.has(f.fault)) faults.emplace_back(f.name);
    j = {{"seed", c.seed},
         {"weights", weights},
         {"slots", c.slots},
         {"cache_policy", to_string(c.cache_policy)},
         {"rebind_policy", to_string(c.rebind_policy)},
         {"retire_keeps_cache", c.retire_keeps_cache},
         {"sampled", c.sampled},
         {"model", model_to_json(c.model_name, c.model, c.weights_seed)},
         {"cache_capacities", c.capacities},
         {"max_prompt", c.max_prompt},
         {"max_new", c.max_new},
         {"spec_k", c.spec_k},
         {"accept_mean", c.accept_mean},
         {"same_weights_chance", c.same_weights_chance},
         {"backend", to_string(c.backend)},
         {"faults", faults},
         {"design", c.paged ? "paged" : "dense"}};
}

nlohmann::json model_to_json(const std::string& name, const ModelConfig& model, std::uint64_t weights_seed) {
    return {{"name", name},
            {"family", to_string(model.family)},
            {"vocab", model.vocab},
            {"dim", model.dim},
            {"n_layers", model.n_layers},
            {"n_heads", model.n_heads},
            {"n_kv_heads", model.n_kv_heads},
            {"head_dim", model.head_dim},
            {"ffn_dim", model.ffn_dim},
            {"max_seq_len", model.max_seq_len},
            {"rope_theta", model.rope_theta},
            {"norm_eps", model.norm_eps},
            {"weights_seed", weights_seed}};
}

ModelConfig model_from_json(const nlohmann::json& m) {
    ModelConfig c;
    c.family = family_from_string(json_field<std::string>(m, "family"));
    c.vocab = json_field<int>(m, "vocab");
    c.dim = json_field<int>(m, "dim");
    c.n_layers = json_field<int>(m, "n_layers");
    c.n_heads = json_field<int>(m, "n_heads");
    c.n_kv_heads = json_field<int>(m, "n_kv_heads");
    c.head_dim = json_field<int>(m, "head_dim");
    c.ffn_dim = json_field<int>(m, "ffn_dim");
    c.max_seq_len = json_field<int>(m, "max_seq_len");
    c.rope_theta = json_field<float>(m, "rope_theta");
    c.norm_eps = json_field<float>(m, "norm_eps");
    c.validate();
    // A trace is input: refuse a model no simulation here could hold.
    const std::size_t limit = std::size_t{1} << 28;
    const std::size_t floats = Model::weight_count(c, false);
    require(floats <= limit, "model of ", floats, " weights is too large to simulate (limit ", limit, ")");
    return c;
}

SimConfig config_from_json(const nlohmann::json& j) {
    SimConfig c;
    c.seed = json_field<std::uint64_t>(j, "seed");
    const nlohmann::json& w = j.contains("weights") ? j.at("weights") : nlohmann::json();
    for (int k = 0; k < kOpKinds; ++k)
        c.weights[k] = json_int_in(w, std::string(to_string(OpKind(k))).c_str(), 0, 100);
    require(c.weights[int(OpKind::admit)] > 0 && c.weights[int(OpKind::decode)] > 0,
            "weights: admit and decode must be enabled");
    c.slots = json_int_in(j, "slots", 1, 16);
    c.cache_policy = cache_policy_from_string(json_field<std::string>(j, "cache_policy"));
    c.rebind_policy = rebind_policy_from_string(json_field<std::string>(j, "rebind_policy"));
    c.retire_keeps_cache = json_field<bool>(j, "retire_keeps_cache");
    c.sampled = json_field<bool>(j, "sampled");
    const nlohmann::json& m = j.contains("model") ? j.at("model") : nlohmann::json();
    c.model_name = json_field<std::string>(m, "name");
    c.model = model_from_json(m);
    c.weights_seed = json_field<std::uint64_t>(m, "weights_seed");
    c.max_prompt = json_int_in(j, "max_prompt", 1, 4096);
    c.capacities = json_field<std::vector<int>>(j, "cache_capacities");
    require(!c.capacities.empty() && c.capacities.size() <= 16, "field 'cache_capacities' holds ",
            c.capacities.size(), " values: must hold 1..16");
    for (int cap : c.capacities)
        require(cap > c.max_prompt && cap <= c.model.max_seq_len, "field 'cache_capacities' holds ", cap,
                ": each must be in ", c.max_prompt + 1, "..", c.model.max_seq_len,
                " (max_prompt + 1 .. the model's max_seq_len)");
    c.max_new = json_int_in(j, "max_new", 0, 1 << 20);
    c.spec_k = json_int_in(j, "spec_k", 1, 64);
    c.accept_mean = json_field<float>(j, "accept_mean");
    c.same_weights_chance = json_field<float>(j, "same_weights_chance");
    c.backend = backend_from_string(json_field<std::string>(j, "backend"));
    for (const std::string& name : json_field<std::vector<std::string>>(j, "faults")) {
        c.faults.add(require_fault(name, FaultDesign::dense));
    }
    // Written since the paged design joined the swarm; a trace from before is dense.
    if (j.contains("design")) {
        const std::string design = json_field<std::string>(j, "design");
        require(design == "dense" || design == "paged", "field 'design' = '", design, "': expected dense or paged");
        c.paged = design == "paged";
    }
    return c;
}

}  // namespace kvweld::sim
