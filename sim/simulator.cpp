#include "sim/simulator.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "engine/faults.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvweld::sim {

namespace {

// Thrown by fail() to unwind out of the op that violated an oracle.
struct Stop {};

}  // namespace

Simulator::Simulator(const SimConfig& config, OracleSwitches oracles)
    : config_(config), oracles_(oracles) {
    config_.model.validate();
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
        const bool wants_tokens = kind == OpKind::decode || kind == OpKind::spec;
        if (wants_tokens && (len >= s.request->max_len ||
                             len + static_cast<std::size_t>(room) >
                                 static_cast<std::size_t>(config_.model.max_seq_len)))
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
    return true;
}

void Simulator::fail(Verdict v, Oracle o, std::string detail) {
    verdict_ = v;
    failure_ = Failure{op_index_, std::string(to_string(op_kind_)), o, std::move(detail)};
    throw Stop{};
}

void Simulator::track_storage(TrackedCache& c) {
    c.generation = ++cache_generations_;
    c.storage = c.cache.storage_serials();
}

TrackedCache Simulator::new_cache() {
    TrackedCache c{KvCache::with_capacity(config_.model), 0, {}};
    track_storage(c);
    return c;
}

// ---- ops -------------------------------------------------------------------

void Simulator::admit(const Op& op, int s) {
    Slot& slot = slots_[s];
    const bool recycle = !op.fresh && slot.cache.has_value();
    if (recycle) {
        slot.cache->cache.truncate_to(0);  // same allocation: the plan stays valid
    } else {
        slot.cache.reset();
        slot.cache = new_cache();
    }
    Request r;
    r.accept = op.accept;
    r.max_len = op.tokens.size() + static_cast<std::size_t>(op.max_new);
    r.shadow = std::make_unique<ReferenceKv>(config_.model);
    slot.request = std::move(r);
    ++stats_.requests;
    std::vector<int> prompt = op.tokens;
    for (int& t : prompt) t %= config_.model.vocab;
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
    slot.cache->cache.truncate_to(to);
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
    track_storage(*slot.cache);
    Request& r = *slot.request;
    const std::vector<int> history = std::move(r.history);
    const int pending = r.pending;
    r.history.clear();
    Rng chooser(0);
    for (int t : history) checked_decode(s, t, chooser);
    r.pending = pending;
}

void Simulator::set_layer(const Op& op, int s) {
    TrackedCache& c = *slots_[s].cache;
    const int l = op.layer % config_.model.n_layers;
    KvLayer copy = c.cache.layer(l)->copy();
    const StorageSerial serial = copy->serial();
    c.cache.set_layer(l, std::move(copy));
    c.generation = ++cache_generations_;
    c.storage[static_cast<std::size_t>(l)] = serial;
}

void Simulator::truncate(const Op& op, int s) {
    Slot& slot = slots_[s];
    Request& r = *slot.request;
    const std::size_t n = op.length % (r.history.size() + 1);
    if (n < r.history.size()) r.pending = r.history[n];
    r.history.resize(n);
    slot.cache->cache.truncate_to(static_cast<int>(n));
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
