#include "engine/decode_session.hpp"

#include "util/assert.hpp"
#include "util/cat.hpp"
#include "util/enum_names.hpp"
#include "engine/cpu_plan.hpp"
#include "engine/cuda_limits.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"

namespace kvweld {

namespace {
constexpr NameTable<Backend, 2> kBackends{{{Backend::cpu, "cpu"}, {Backend::cuda, "cuda"}}};
constexpr NameTable<RebindPolicy, 2> kRebindPolicies{
    {{RebindPolicy::rebind, "rebind"}, {RebindPolicy::rebuild, "rebuild"}}};
}  // namespace

std::string_view to_string(Backend b) { return name_in(kBackends, b); }
Backend backend_from_string(std::string_view s) { return parse_in(kBackends, s, "backend"); }
std::string_view to_string(RebindPolicy p) { return name_in(kRebindPolicies, p); }
RebindPolicy rebind_policy_from_string(std::string_view s) { return parse_in(kRebindPolicies, s, "rebind policy"); }

namespace {

std::vector<KvLayer> layers_of(const KvCache& cache) {
    std::vector<KvLayer> out;
    for (int l = 0; l < cache.n_layers(); ++l) out.push_back(cache.layer(l));
    return out;
}

}  // namespace

DecodeSession::DecodeSession(SessionOptions options) : options_(options) {
    require(options_.threads >= 1 && options_.threads <= 256, "SessionOptions.threads = ", options_.threads,
            ": must be in 1..256");
}
void DecodeSession::set_threads(int threads) {
    require(threads >= 1 && threads <= 256, "set_threads: ", threads, " threads: must be in 1..256");
    options_.threads = threads;
    if (!plan_) return;
    if (fault_on(Fault::threads_in_key)) return plan_.reset();  // the next decode builds anew
    plan_->set_threads(threads);
}

DecodeSession::~DecodeSession() = default;
DecodeSession::DecodeSession(DecodeSession&&) noexcept = default;
DecodeSession& DecodeSession::operator=(DecodeSession&&) noexcept = default;

void DecodeSession::validate_input(const Model& model, const KvCache& cache, int token) const {
    const int vocab = model.config().vocab;
    require(token >= 0 && token < vocab,
            "token ", token, " out of range: vocab_size is ", vocab);
    require_cache_fits(model, cache);
    cache.require_room();
}

Validity DecodeSession::check(const Model& model, const KvCache& cache, const Adapters& adapters) const {
    require(plan_ != nullptr, "check: the session holds no plan");
    return kvweld::check(plan_->key(), key_of(model, cache, adapters));
}

Validity DecodeSession::check(const Model& model, const KvPool& pool, int position, const Adapters& adapters) const {
    require(plan_ != nullptr, "check: the session holds no plan");
    return kvweld::check(plan_->key(), key_of(model, pool, position, adapters));
}

void DecodeSession::require_backend_adapters(const Adapters& adapters) const {
    require(options_.backend == Backend::cpu || int(adapters.loras().size()) <= kMaxCudaLoras, "backend=cuda: ",
            adapters.loras().size(), " LoRA adapters in a set, the CUDA plan takes at most ", kMaxCudaLoras);
}

std::vector<StorageSerial> DecodeSession::bound_serials() const {
    return plan_ ? plan_->bound_serials() : std::vector<StorageSerial>{};
}


void DecodeSession::build(const Model& model, const Target& target, BuildReason reason) {
    // Drop the old plan first, so its buffers (device memory on CUDA) are
    // free for the new one; a plan that must be rebuilt is of no use anyway.
    plan_.reset();
    if (target.pool) {
        plan_ = make_paged_plan(options_.backend, model, *target.pool, target.position, options_.threads,
                                *target.adapters);
        KVWELD_ASSERT(plan_->key().model == model.id() && plan_->key().alloc == target.pool->alloc_id());
    } else {
        plan_ = make_plan(options_.backend, model, *target.cache, options_.threads, *target.adapters);
        KVWELD_ASSERT(plan_->key().model == model.id() && plan_->key().alloc == target.cache->alloc_id());
        KVWELD_ASSERT(plan_->key().max_seq_len == target.cache->geometry().max_seq_len &&
                      plan_->key().n_layers == target.cache->n_layers());
    }
    // The fault's counters report reuse that did not happen.
    if (fault_on(Fault::build_counted_as_kept) && reason != BuildReason::initial) {
        ++counters_.kept;
        return;
    }
    ++counters_.builds;
    ++counters_.builds_by_reason[static_cast<int>(reason)];
}

bool DecodeSession::try_rebind(const PlanKey& now, const Target& target) {
    try {
        if (target.pool) plan_->rebind_pool(*target.pool);
        else plan_->rebind(layers_of(*target.cache));
    } catch (const Error&) {
        return false;  // incompatible buffers: the caller rebuilds instead
    }
    PlanKey key = plan_->key();
    key.alloc = now.alloc;
    plan_->set_key(key);
    // A rebind moves the allocation only: everything baked stays as built.
    KVWELD_ASSERT(plan_->key().max_seq_len == now.max_seq_len && plan_->key().n_layers == now.n_layers &&
                  plan_->key().alloc == now.alloc);
    ++counters_.rebinds;
    return true;
}

void DecodeSession::prepare(const Model& model, const PlanKey& now, const Target& target) {
    if (!plan_) return build(model, target, BuildReason::initial);
    if (options_.replan_every_token) return build(model, target, BuildReason::replan);
    const Validity v = kvweld::check(plan_->key(), now);
    switch (v.kind) {
        case Validity::Kind::valid: ++counters_.kept; return;
        case Validity::Kind::allocation_changed:
            if (options_.policy == RebindPolicy::rebind && try_rebind(now, target)) return;
            return build(model, target, BuildReason::allocation_changed);
        case Validity::Kind::stale: return build(model, target, v.reason);
    }
}

std::span<const float> DecodeSession::decode(const Model& model, KvCache& cache, int token,
                                             const Adapters& adapters) {
    validate_input(model, cache, token);
    require_backend_adapters(adapters);
    cache.settle(model.config().rope_theta);  // a context shift's owed rotations: data, not the plan's
    prepare(model, key_of(model, cache, adapters), Target{&cache, nullptr, cache.cached_len(), &adapters});
    const int pos = cache.cached_len();
    const std::span<const float> logits = plan_->run(StepParams{token, pos, pos + 1, {}, &adapters});
    cache.advance();
    return logits;
}

void DecodeSession::decode_span(const Model& model, KvCache& cache, std::span<const int> tokens,
                                const Adapters& adapters, bool causal, const Plan::StepRows& each) {
    require(!tokens.empty(), "decode_span: no tokens");
    for (int token : tokens) validate_input(model, cache, token);
    const int pos = cache.cached_len(), n = int(tokens.size());
    require(pos + n <= cache.geometry().max_seq_len, "decode_span: ", n, " tokens at position ", pos,
            " overflow the cache's capacity ", cache.geometry().max_seq_len);
    require_backend_adapters(adapters);
    cache.settle(model.config().rope_theta);
    prepare(model, key_of(model, cache, adapters), Target{&cache, nullptr, pos, &adapters});
    counters_.kept += std::uint64_t(n - 1);  // the same plan runs the span's other tokens
    std::vector<StepParams> steps;
    for (int i = 0; i < n; ++i) steps.push_back(StepParams{tokens[std::size_t(i)], pos + i, pos + i + 1, {}, &adapters});
    plan_->run_span(steps, causal, each);
    for (int i = 0; i < n; ++i) cache.advance();
}

std::span<const float> DecodeSession::decode(const Model& model, KvPool& pool, PagedSequence& seq, int token,
                                             const Adapters& adapters) {
    const ModelConfig& c = model.config();
    require_backend_adapters(adapters);
    require(token >= 0 && token < c.vocab, "token ", token, " out of range: vocab_size is ", c.vocab);
    require(pool.n_layers() == c.n_layers && pool.kv_dim() == c.kv_dim(), "KV pool of ", pool.n_layers(),
            " layers, kv_dim ", pool.kv_dim(), " cannot serve a model of ", c.n_layers, " layers, kv_dim ", c.kv_dim());
    const int pos = seq.length();
    require(pos < c.max_seq_len, "paged sequence is full: ", pos, " positions, the model's max_seq_len is ",
            c.max_seq_len);
    require(seq.append(pool).has_value(), "KV pool exhausted: all ", pool.n_blocks(), " blocks of ",
            pool.block_size(), " positions are in use");
    try {
        prepare(model, key_of(model, pool, pos, adapters), Target{nullptr, &pool, pos, &adapters});
    } catch (...) {
        seq.truncate_to(pool, pos);  // the appended row goes back: nothing changed
        throw;
    }
    return plan_->run(
        StepParams{token, pos, pos + 1, std::span<const int>(seq.table().data(), seq.table().size()), &adapters});
}

namespace {
void require_cuda_dense(const Model& model) {
    require(!model.config().moe(), "backend=cuda: the CUDA plan has no mixture-of-experts kernels yet (the CPU plan "
            "does): ", model.config().describe());
}
}  // namespace

std::unique_ptr<Plan> make_plan(Backend backend, const Model& model, const KvCache& cache, int threads,
                                const Adapters& adapters) {
    if (backend == Backend::cpu) return std::make_unique<CpuPlan>(model, cache, threads, adapters);
    require_cuda_dense(model);
    return make_cuda_plan(model, cache, adapters);
}

std::unique_ptr<Plan> make_paged_plan(Backend backend, const Model& model, const KvPool& pool, int position,
                                      int threads, const Adapters& adapters) {
    if (backend == Backend::cuda) {
        require_cuda_dense(model);
        return make_cuda_paged_plan(model, pool, position, adapters);
    }
    return std::make_unique<CpuPlan>(model, pool, position, threads, adapters);
}

}  // namespace kvweld
