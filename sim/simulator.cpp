#include "sim/simulator.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "engine/faults.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace kvweld::sim {

namespace {

// Thrown by fail() to unwind out of the op that violated an oracle.
struct Stop {};

// What a run may hold at once: a cache and a reference shadow per slot.
constexpr std::size_t kMaxSimKvBytes = std::size_t{4} << 30;

void require_simulable(const SimConfig& c) {
    c.model.validate();
    require(!c.capacities.empty(), "the config has no cache capacities");
    for (int cap : c.capacities)
        require(cap > 0 && cap <= c.model.max_seq_len, "cache capacity ", cap, " is outside 1..max_seq_len = ",
                c.model.max_seq_len);
    const std::size_t per_slot = 2 * KvGeometry::of(c.model).bytes();
    const std::size_t total = per_slot * static_cast<std::size_t>(c.slots);
    require(per_slot / 2 <= kMaxCacheBytes && total <= kMaxSimKvBytes, "this run could hold ", total,
            " bytes of KV (", c.slots, " slots x (cache + reference shadow) of ", per_slot / 2,
            " bytes each): the limit is ", kMaxSimKvBytes, "; model ", c.model.describe());
}

}  // namespace

Simulator::Simulator(const SimConfig& config, OracleSwitches oracles)
    : config_(config), oracles_(oracles) {
    require_simulable(config_);
    weights_seed_ = config_.weights_seed;
    model_.emplace(Model::random(config_.model, weights_seed_, &pool_));
    for (int i = 0; i < config_.slots; ++i)
        slots_.emplace_back(Slot{{}, {}, DecodeSession({.policy = config_.rebind_policy,
                                                         .backend = config_.backend}),
                                 {}});
}

std::vector<int> Simulator::free_slots() const {
    std::vector<int> out;
    for (int i = 0; i < config_.slots; ++i)
        if (!slots_[i].request) out.push_back(i);
    return out;
}

std::vector<int> Simulator::eligible(OpKind kind, int room) const {
    if (kind == OpKind::admit) return free_slots();
    std::vector<int> out;
    if (kind == OpKind::migrate && free_slots().empty()) return out;
    for (int i = 0; i < config_.slots; ++i) {
        const Slot& s = slots_[i];
        if (!s.request) continue;
        const std::size_t len = s.request->history.size();
        const auto capacity = static_cast<std::size_t>(s.cache->cache.geometry().max_seq_len);
        const bool wants_tokens = kind == OpKind::decode || kind == OpKind::spec;
        if (wants_tokens && (len >= s.request->max_len || len + static_cast<std::size_t>(room) > capacity))
            continue;
        out.push_back(i);
    }
    return out;
}

bool Simulator::apply(const Op& op, std::size_t op_index) {
    op_index_ = op_index;
    op_kind_ = op.kind;
    const int room = op.kind == OpKind::spec ? static_cast<int>(op.tokens.size()) + 2 : 1;
    const std::vector<int> slots = op.kind == OpKind::reload ? std::vector<int>{0} : eligible(op.kind, room);
    if (slots.empty()) {
        ++stats_.ops_skipped;
        return true;
    }
    const int s = slots[op.pick % slots.size()];
    try {
        switch (op.kind) {
            case OpKind::admit: admit(op, s); break;
            case OpKind::decode: decode_op(op, s); break;
            case OpKind::spec: spec(op, s); break;
            case OpKind::retire: retire(s); break;
            case OpKind::clear: clear(s); break;
            case OpKind::set_layer: set_layer(op, s); break;
            case OpKind::truncate: truncate(op, s); break;
            case OpKind::reload: reload(op); break;
            case OpKind::migrate: {
                const std::vector<int> to = free_slots();
                migrate(s, to[op.pick2 % to.size()]);
                break;
            }
        }
    } catch (const Stop&) {
        ++stats_.ops_run;
        return false;
    } catch (const Error& e) {
        ++stats_.ops_run;
        verdict_ = Verdict::engine_error;
        failure_ = Failure{op_index_, std::string(to_string(op_kind_)), Oracle::engine, e.what()};
        return false;
    }
    ++stats_.ops_run;
    for (int i = 0; i < config_.slots; ++i) check_invariants(i);
    return true;
}

void Simulator::fail(Verdict v, Oracle o, std::string detail) {
    verdict_ = v;
    failure_ = Failure{op_index_, std::string(to_string(op_kind_)), o, std::move(detail)};
    throw Stop{};
}

// After the simulator replaced all of a cache's storage (construct, clear):
// the ledger accepts the cache's report only if it is all new storage.
void Simulator::record_replaced_storage(TrackedCache& c) {
    std::vector<KvLayer> layers;
    for (int l = 0; l < c.cache.n_layers(); ++l) layers.push_back(c.cache.layer(l));
    if (const auto violation = ledger_.accept(layers)) fail(Verdict::engine_error, Oracle::ledger, *violation);
    c.generation = ++cache_generations_;
    c.ledger.storage = std::move(layers);
}

TrackedCache Simulator::new_cache(int capacity) {
    KvGeometry g = KvGeometry::of(config_.model);
    g.max_seq_len = capacity;
    TrackedCache c{KvCache::with_capacity(g), 0, {}};
    record_replaced_storage(c);
    return c;
}

// A fresh cache's capacity: one of the seed's capacities, chosen by the op.
int Simulator::capacity_for(const Op& op) const {
    return config_.capacities[op.pick2 % config_.capacities.size()];
}

// ---- ops -------------------------------------------------------------------

void Simulator::admit(const Op& op, int s) {
    Slot& slot = slots_[s];
    const bool recycle = !op.fresh && slot.cache.has_value();
    if (recycle) {
        truncate_cache(*slot.cache, 0);  // same allocation: the plan stays valid
    } else {
        slot.cache.reset();
        slot.cache = new_cache(capacity_for(op));
    }
    Request r;
    r.accept = op.accept;
    r.max_len = op.tokens.size() + static_cast<std::size_t>(op.max_new);
    r.shadow = std::make_unique<ReferenceKv>(config_.model);
    slot.request = std::move(r);
    ++stats_.requests;
    std::vector<int> prompt = op.tokens;
    for (int& t : prompt) t %= config_.model.vocab;
    // A prompt that does not fit the cache is cut, as a server would; a
    // generated one always fits (capacities exceed max_prompt).
    const auto room = static_cast<std::size_t>(slot.cache->cache.geometry().max_seq_len - 1);
    if (prompt.size() > room) prompt.resize(room);
    Rng chooser(op.seed);
    prefill(s, prompt, chooser);
}

void Simulator::prefill(int s, const std::vector<int>& tokens, Rng& chooser) {
    int next = 0;
    for (int t : tokens) next = checked_decode(s, t, chooser);
    slots_[s].request->pending = next;
}

void Simulator::decode_op(const Op& op, int s) {
    Rng chooser(op.seed);
    Request& r = *slots_[s].request;
    r.pending = checked_decode(s, r.pending, chooser);
}

// k = drafts + 1 decodes (the pending token, then the drafts); accept m
// drafts; truncate_to(base + 1 + m); then decode the bonus token the model
// chose after the last accepted one.
void Simulator::spec(const Op& op, int s) {
    Rng chooser(op.seed);
    Slot& slot = slots_[s];
    Request& r = *slot.request;
    const std::size_t base = r.history.size();
    const int k = static_cast<int>(op.tokens.size()) + 1;
    std::vector<int> chosen(k);
    for (int i = 0; i < k; ++i) {
        const int token = i == 0 ? r.pending : op.tokens[i - 1] % config_.model.vocab;
        chosen[i] = checked_decode(s, token, chooser);
    }
    const int keep = static_cast<int>(base) + 1 + op.m;
    int to = keep;
    // The scheduler fault keeps one rejected draft's K/V in the cache.
    if (fault_on(Fault::spec_reject_off_by_one) && op.m < k - 1) to = keep + 1;
    truncate_cache(*slot.cache, to);
    r.history.resize(static_cast<std::size_t>(keep));
    r.pending = checked_decode(s, chosen[op.m], chooser);
}

void Simulator::retire(int s) {
    Slot& slot = slots_[s];
    slot.request.reset();
    if (!config_.retire_keeps_cache) slot.cache.reset();
    // The session stays with the slot: its plan is held into the next request.
}

void Simulator::clear(int s) {
    Slot& slot = slots_[s];
    slot.cache->cache.clear();
    record_replaced_storage(*slot.cache);
    Request& r = *slot.request;
    const std::vector<int> history = std::move(r.history);
    const int pending = r.pending;
    r.history.clear();
    Rng chooser(0);
    for (int t : history) checked_decode(s, t, chooser);
    r.pending = pending;
}

namespace {

constexpr float kPoison = std::numeric_limits<float>::quiet_NaN();

// A swapped-in layer as a real server restores it: the valid rows [0, rows)
// of `from`, and nothing meaningful after them. The rows past the end are
// NaN, so a plan that fails to write a row here leaves a NaN that the KV
// content oracle cannot mistake for the right row (a plain copy would keep
// rows a truncate left behind, identical to what the next decode writes).
KvLayer swapped_in_copy(KvStorage& from, int rows) {
    if (from.device()) from.device()->download(from, 0, rows);  // the device copy is current
    auto out = std::make_shared<KvStorage>(from.max_seq_len(), from.kv_dim(), from.dtype());
    for (int pos = 0; pos < from.max_seq_len(); ++pos) {
        const bool valid = pos < rows;
        for (int i = 0; i < from.kv_dim(); ++i) {
            out->key_row(pos)[i] = valid ? from.key_row(pos)[i] : kPoison;
            out->value_row(pos)[i] = valid ? from.value_row(pos)[i] : kPoison;
        }
    }
    return out;
}

}  // namespace

// Rows [n, cached_len) of the ledger's storage are dead after truncate_to(n):
// the contract lets no plan read them before it writes them again. The
// harness fills them with NaN (as ASan poisons freed memory), so that a
// decode that fails to write its row cannot pass for one that wrote the same
// bytes a truncated-away decode left there. Invariant: every row at or past
// cached_len is zero (fresh) or NaN.
void Simulator::truncate_cache(TrackedCache& c, int n) {
    const int from = n, to = c.cache.cached_len();
    c.cache.truncate_to(n);
    if (from >= to) return;
    for (const KvLayer& layer : c.ledger.storage) {
        for (int pos = from; pos < to; ++pos) {
            std::fill_n(layer->key_row(pos), layer->kv_dim(), kPoison);
            std::fill_n(layer->value_row(pos), layer->kv_dim(), kPoison);
        }
        if (layer->device()) layer->device()->upload(*layer, from, to - from);
    }
}

void Simulator::set_layer(const Op& op, int s) {
    TrackedCache& c = *slots_[s].cache;
    const int l = op.layer % config_.model.n_layers;
    KvLayer copy = swapped_in_copy(*c.ledger.storage[static_cast<std::size_t>(l)], c.cache.cached_len());
    if (const auto violation = ledger_.accept({copy})) fail(Verdict::engine_error, Oracle::ledger, *violation);
    std::vector<KvLayer> expected = c.ledger.storage;
    expected[static_cast<std::size_t>(l)] = copy;
    c.cache.set_layer(l, std::move(copy));
    // The cache must now report exactly the ledger's storage: the new layer
    // at l, every other layer untouched.
    for (int i = 0; i < c.cache.n_layers(); ++i)
        if (c.cache.layer(i) != expected[static_cast<std::size_t>(i)])
            fail(Verdict::engine_error, Oracle::ledger,
                 cat("after set_layer(", l, ") the cache reports storage serial ", c.cache.layer(i)->serial().get(),
                     " in layer ", i, " where the ledger holds ", expected[static_cast<std::size_t>(i)]->serial().get()));
    c.generation = ++cache_generations_;
    c.ledger.storage = std::move(expected);
}

void Simulator::truncate(const Op& op, int s) {
    Slot& slot = slots_[s];
    Request& r = *slot.request;
    const std::size_t n = op.length % (r.history.size() + 1);
    if (n < r.history.size()) r.pending = r.history[n];
    r.history.resize(n);
    truncate_cache(*slot.cache, static_cast<int>(n));
}

void Simulator::reload(const Op& op) {
    // Destroy first, so the recycling resource hands the new model the old address.
    model_.reset();
    const std::uint64_t seed = op.same_weights ? weights_seed_ : op.seed;
    if (seed != weights_seed_) ++weights_generation_;
    weights_seed_ = seed;
    model_.emplace(Model::random(config_.model, weights_seed_, &pool_));
    ++model_generation_;
}

void Simulator::migrate(int from, int to) {
    Slot& src = slots_[from];
    Slot& dst = slots_[to];
    dst.cache = std::move(src.cache);
    dst.request = std::move(src.request);
    src.cache.reset();
    src.request.reset();
}

}  // namespace kvweld::sim
