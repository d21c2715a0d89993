#include "engine/plan_key.hpp"

#include "engine/adapters.hpp"
#include "util/cat.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "engine/kv_cache.hpp"
#include "engine/kv_pool.hpp"
#include "engine/model.hpp"
#include "engine/plan.hpp"

namespace kvweld {

namespace {
constexpr NameTable<BuildReason, kBuildReasons> kBuildReasonNames{{
    {BuildReason::initial, "initial"},
    {BuildReason::replan, "replan"},
    {BuildReason::allocation_changed, "allocation_changed"},
    {BuildReason::model_instance, "model_instance"},
    {BuildReason::family, "family"},
    {BuildReason::geometry, "geometry"},
    {BuildReason::dtype, "dtype"},
    {BuildReason::max_seq_len, "max_seq_len"},
    {BuildReason::n_layers, "n_layers"},
    {BuildReason::adapters, "adapters"},
}};
}  // namespace

std::string_view to_string(BuildReason r) { return name_in(kBuildReasonNames, r); }

std::string Validity::describe() const {
    switch (kind) {
        case Kind::valid: return "Valid";
        case Kind::allocation_changed: return "AllocationChanged";
        case Kind::stale: return cat("Stale{", to_string(reason), "}");
    }
    return "?";
}

void require_cache_fits(const Model& model, const KvCache& cache) {
    const ModelConfig& c = model.config();
    const KvGeometry& g = cache.geometry();
    require(g.n_layers == c.n_layers,
            "cache has ", g.n_layers, " layers but the model has ", c.n_layers);
    require(g.kv_dim() == c.kv_dim(),
            "cache KV width ", g.kv_dim(), " does not match the model's ", c.kv_dim());
    require(g.max_seq_len <= c.max_seq_len,
            "cache capacity ", g.max_seq_len, " exceeds the model's max_seq_len ",
                c.max_seq_len);
}

std::span<const float> Plan::hidden() const {
    if (!fault_on(Fault::embeddings_baked)) return read_hidden();
    if (hidden_at_build_.empty()) {
        const std::span<const float> now = read_hidden();
        hidden_at_build_.assign(now.begin(), now.end());
    }
    return hidden_at_build_;
}

void Plan::run_span(std::span<const StepParams> steps, bool causal, const StepRows& each) {
    require(causal || steps.size() <= 1, "non-causal attention over ", steps.size(),
            " tokens of a sequence: this backend's plan attends causally only");
    for (std::size_t i = 0; i < steps.size(); ++i) each(i, run(steps[i]));
}

void Plan::rebind_pool(const KvPool&) { throw Error("rebind_pool: this plan reads a dense cache, not a KV pool"); }

float step_lora_factor(std::span<const LoraUse> baked, std::size_t i, const StepParams& step) {
    const LoraUse& built = baked[i];
    if (fault_on(Fault::lora_scale_baked) || !step.adapters) return built.factor();
    const std::span<const LoraUse> now = step.adapters->loras();
    return i < now.size() && now[i].adapter->id() == built.adapter->id() ? now[i].factor() : built.factor();
}

const ControlVector* step_cvec(const std::optional<ControlVector>& cvec_at_build, const StepParams& step) {
    if (fault_on(Fault::cvec_baked)) return cvec_at_build ? &*cvec_at_build : nullptr;
    return step.adapters ? step.adapters->cvec() : nullptr;
}

void require_rebind_compatible(std::span<const KvLayer> layers, const PlanKey& key, int kv_dim) {
    require(layers.size() == static_cast<std::size_t>(key.n_layers), "rebind: ", layers.size(),
            " layers offered, the plan has ", key.n_layers);
    for (std::size_t l = 0; l < layers.size(); ++l) {
        const KvLayer& layer = layers[l];
        require(layer && layer->max_seq_len() == key.max_seq_len && layer->kv_dim() == kv_dim &&
                    layer->dtype() == key.dtype,
                "rebind: layer ", l, " is incompatible with the plan's [", key.max_seq_len, " x ", kv_dim, "] ",
                to_string(key.dtype), " buffers; nothing rebound");
    }
}

namespace {

// Everything the model and the adapters contribute to a key.
PlanKey model_key(const Model& model, const Adapters& adapters) {
    const ModelConfig& c = model.config();
    PlanKey k;
    k.family = c.family;
    k.vocab = c.vocab;
    k.dim = c.dim;
    k.n_heads = c.n_heads;
    k.n_kv_heads = c.n_kv_heads;
    k.head_dim = c.head_dim;
    k.ffn_dim = c.ffn_dim;
    k.rope_theta = c.rope_theta;
    k.norm_eps = c.norm_eps;
    k.n_layers = c.n_layers;
    k.model = model.id();
    k.weight_address = model.weight_address();
    if (fault_on(Fault::model_key_by_content)) k.weight_digest = weight_digest(model);
    k.adapters = adapters.set_id();
    k.scales_version = adapters.scales_version();
    k.cvec_version = adapters.cvec_version();
    k.warmup_version = adapters.warmup_version();
    k.moe = c.moe();
    return k;
}

}  // namespace

PlanKey key_of(const Model& model, const KvCache& cache, const Adapters& adapters) {
    PlanKey k = model_key(model, adapters);
    k.dtype = cache.geometry().dtype;
    k.max_seq_len = cache.geometry().max_seq_len;
    k.alloc = cache.alloc_id();
    k.position = cache.cached_len();
    return k;
}

// A paged plan serves every sequence of the pool: a sequence's reach is the
// model's max_seq_len (its RoPE table), and the pool's id is the allocation.
PlanKey key_of(const Model& model, const KvPool& pool, int position, const Adapters& adapters) {
    PlanKey k = model_key(model, adapters);
    k.dtype = Dtype::f32;
    k.max_seq_len = model.config().max_seq_len;
    k.block_size = pool.block_size();
    k.alloc = pool.alloc_id();
    k.position = position;
    return k;
}

namespace {

bool same_geometry(const PlanKey& a, const PlanKey& b) {
    return a.vocab == b.vocab && a.dim == b.dim && a.n_heads == b.n_heads &&
           a.n_kv_heads == b.n_kv_heads && a.head_dim == b.head_dim && a.ffn_dim == b.ffn_dim &&
           a.rope_theta == b.rope_theta && a.norm_eps == b.norm_eps && a.block_size == b.block_size;
}

// Model identity as the faults see it: by id (correct), by weight address
// (recycled addresses alias), or not at all.
bool same_model(const PlanKey& held, const PlanKey& now) {
    if (fault_on(Fault::geometry_only_key) || fault_on(Fault::model_id_not_in_key)) return true;
    if (fault_on(Fault::weight_pointer_key)) return held.weight_address == now.weight_address;
    if (fault_on(Fault::model_key_by_content)) return held.weight_digest == now.weight_digest;
    return held.model == now.model;
}

// The adapter set as the faults see it: not at all, or with the per-step
// scales and control vector wrongly in the key.
bool same_adapters(const PlanKey& held, const PlanKey& now) {
    if (fault_on(Fault::lora_scale_in_key) && held.scales_version != now.scales_version) return false;
    if (fault_on(Fault::cvec_in_key) && held.cvec_version != now.cvec_version) return false;
    if (fault_on(Fault::warmup_in_key) && now.moe && held.warmup_version != now.warmup_version) return false;
    if (fault_on(Fault::adapter_set_not_in_key)) return true;
    return held.adapters == now.adapters;
}

bool same_allocation(const PlanKey& held, const PlanKey& now) {
    if (fault_on(Fault::geometry_only_key)) return true;
    return held.alloc == now.alloc;
}

}  // namespace

Validity check(const PlanKey& held, const PlanKey& now) {
    if (fault_on(Fault::always_stale)) return Validity::stale(BuildReason::model_instance);
    if (held.family != now.family) return Validity::stale(BuildReason::family);
    if (held.n_layers != now.n_layers) return Validity::stale(BuildReason::n_layers);
    if (!same_geometry(held, now)) return Validity::stale(BuildReason::geometry);
    if (fault_on(Fault::position_in_key) && held.position != now.position)
        return Validity::stale(BuildReason::geometry);
    if (held.dtype != now.dtype) return Validity::stale(BuildReason::dtype);
    if (held.max_seq_len != now.max_seq_len) return Validity::stale(BuildReason::max_seq_len);
    if (!same_model(held, now)) return Validity::stale(BuildReason::model_instance);
    if (!same_adapters(held, now)) return Validity::stale(BuildReason::adapters);
    if (!same_allocation(held, now)) return Validity::allocation_changed();
    return Validity::valid();
}

}  // namespace kvweld
