// The four oracles, run on every decode. None of them consults KvAllocId.
//   data        logits vs the reference forward over the request's own history
//   kv          the storage the ledger says the cache holds must contain, at
//               the decoded position, the K/V rows the reference computed
//   weld        the plan's bound storage vs the storage the ledger says the cache holds
//   accounting  the engine's build/rebind/keep decision vs what the op log
//               justifies; the session's counters are cross-checked against
//               the plan's identity (a never-recycled serial minted per build)
// What each trusts: data and kv read only the reference forward, the
// simulator's ledger and the bytes in storage; weld reads one engine report
// (the plan's bound serials); accounting reads the session's counters, as a
// user reads llama.cpp's n_reused.
#include "engine/assert.hpp"
#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "engine/faults.hpp"
#include "sim/simulator.hpp"
#include "sim/choose.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvweld::sim {

namespace {

// Data and KV oracle tolerance on logit_error() (engine/reference.hpp). For
// values of order 1 (all simulated models) this is an absolute 1e-4.

bool rows_equal(const KvStorage& a, const KvStorage& b, int rows) {
    const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(a.kv_dim());
    return std::memcmp(a.key_row(0), b.key_row(0), n * sizeof(float)) == 0 &&
           std::memcmp(a.value_row(0), b.value_row(0), n * sizeof(float)) == 0;
}

std::span<const float> row_of(const std::vector<float>& plain, int pos, int kv_dim) {
    return std::span<const float>(plain).subspan(static_cast<std::size_t>(pos) * kv_dim,
                                                 static_cast<std::size_t>(kv_dim));
}

std::span<const float> row_of(const float* row, int kv_dim) {
    return {row, static_cast<std::size_t>(kv_dim)};
}

}  // namespace

// What a plan that missed this change would leave unseen. Measured before
// the decode, judged once the reference has computed the right rows.
struct Simulator::Blindness {
    bool change = false;      // the model or the cache changed since the plan was prepared
    bool data_blind = false;  // a stale plan would read exactly what the live cache holds
    bool same_weights = false;
    bool storage_changed = false;
    // Per layer whose storage a stale plan would miss: what the ledger's
    // storage holds at the decoded position before the decode.
    std::vector<int> layers;
    std::vector<std::vector<float>> key_before, value_before;
};

int Simulator::choose(std::span<const float> logits, Rng& chooser) const {
    return choose_token(logits, config_.sampled, chooser);
}

// Would a plan still welded to its old storage have read exactly what the
// live cache holds in rows [0, pos)? Then the data oracle alone is blind here.
bool Simulator::storage_indistinguishable(const Slot& slot, int pos) const {
    const std::vector<KvLayer>& now = slot.cache->ledger.storage;
    for (std::size_t l = 0; l < now.size(); ++l) {
        const KvLayer& old = slot.plan.storage[l];
        if (old == now[l]) continue;
        // On a device backend the device copy is current; bring it back first.
        for (const KvLayer& s : {old, now[l]})
            if (s->device()) s->device()->download(*s, 0, pos);
        if (!rows_equal(*old, *now[l], pos)) return false;
    }
    return true;
}

Simulator::Blindness Simulator::blindness_before(const Slot& slot, int pos, bool model_changed,
                                                 bool cache_changed) const {
    Blindness b;
    b.change = model_changed || cache_changed;
    if (!b.change) return b;
    b.same_weights = !model_changed || slot.plan.weights_generation == weights_generation_;
    b.storage_changed = cache_changed;
    b.data_blind = b.same_weights && (!cache_changed || storage_indistinguishable(slot, pos));
    if (!cache_changed) return b;
    const std::vector<KvLayer>& now = slot.cache->ledger.storage;
    const int kv_dim = config_.model.kv_dim();
    for (std::size_t l = 0; l < now.size(); ++l) {
        if (slot.plan.storage[l] == now[l]) continue;
        KvStorage& s = *now[l];
        if (s.device()) s.device()->download(s, pos, 1);
        b.layers.push_back(static_cast<int>(l));
        b.key_before.emplace_back(s.key_row(pos), s.key_row(pos) + kv_dim);
        b.value_before.emplace_back(s.value_row(pos), s.value_row(pos) + kv_dim);
    }
    return b;
}

// The KV oracle is blind when a plan that missed the change would leave the
// right rows in the ledger's storage anyway: the weights are the same and
// every layer it would miss already held the right row before the decode
// (or no layer's storage changed at all).
void Simulator::count_blindness(const Blindness& b, const Request& r, int pos) {
    if (!b.change) return;
    ++stats_.change_decodes;
    stats_.data_blind += b.data_blind;
    bool kv_blind = b.same_weights;
    const int kv_dim = config_.model.kv_dim();
    for (std::size_t i = 0; kv_blind && i < b.layers.size(); ++i) {
        const auto l = static_cast<std::size_t>(b.layers[i]);
        kv_blind = logit_error(b.key_before[i], row_of(r.shadow->key[l], pos, kv_dim)) <= kDataTolerance &&
                   logit_error(b.value_before[i], row_of(r.shadow->value[l], pos, kv_dim)) <= kDataTolerance;
    }
    if (!(b.data_blind && kv_blind)) return;
    ++stats_.independent_blind;
    // A reload of identical weights with the cache untouched: a plan that
    // missed it computes exactly the right thing, so no oracle that reads
    // data can see it; only the accounting oracle calls it missed.
    if (!b.storage_changed) ++stats_.blind_same_weights_reload;
}

int Simulator::checked_decode(int s, int token, Rng& chooser) {
    Slot& slot = slots_[s];
    Request& r = *slot.request;
    TrackedCache& tc = *slot.cache;
    const int pos = static_cast<int>(r.history.size());

    // What the op log justifies, before the engine decides. A plan cannot be
    // rebound across capacities (the capacity sizes its buffers).
    const PlanModel& plan = slot.plan;
    const bool model_changed = plan.exists && plan.model_generation != model_generation_;
    const bool cache_changed = plan.exists && plan.cache_generation != tc.generation;
    const bool capacity_changed = plan.exists && plan.capacity != tc.cache.geometry().max_seq_len;
    const bool justified_build =
        !plan.exists || model_changed ||
        (cache_changed && (config_.rebind_policy == RebindPolicy::rebuild || capacity_changed));
    const bool justified_rebind = !justified_build && cache_changed;
    stats_.capacity_rebuilds += plan.exists && !model_changed && cache_changed && capacity_changed &&
                                config_.rebind_policy == RebindPolicy::rebind;
    const bool reference_on = oracles_.data || oracles_.kv;
    const Blindness blindness = reference_on ? blindness_before(slot, pos, model_changed, cache_changed) : Blindness{};

    const SessionCounters before = slot.session.counters();
    const PlanSerial before_serial = slot.session.plan_serial();
    const std::span<const float> logits = slot.session.decode(*model_, tc.cache, token);
    const SessionCounters& after = slot.session.counters();
    ++stats_.decodes;
    stats_.kept += after.kept - before.kept;
    stats_.rebound += after.rebinds - before.rebinds;
    stats_.rebuilt += after.builds - before.builds;
    stats_.justified_builds += justified_build;
    stats_.justified_rebinds += justified_rebind;
    stats_.justified_kept += !justified_build && !justified_rebind;

    if (reference_on) {
        const std::vector<float> want = reference_forward(*model_, *r.shadow, token, pos);
        count_blindness(blindness, r, pos);
        if (oracles_.data) check_data(s, token, logits, want);
        if (oracles_.kv) check_kv(s, pos);
    }
    const int next = choose(logits, chooser);
    if (oracles_.weld) check_weld(s);
    check_plan_identity(s, before, before_serial);
    check_accounting(s, before, justified_build, justified_rebind);
    r.history.push_back(token);
    update_plan_model(slot);
    return next;
}

void Simulator::check_data(int s, int token, std::span<const float> logits, std::span<const float> want) {
    const int pos = static_cast<int>(slots_[s].request->history.size());
    const double err = logit_error(logits, want);
    stats_.max_logit_error = std::max(stats_.max_logit_error, err);
    if (!(err <= kDataTolerance))
        fail(Verdict::stale_decode, Oracle::data,
             cat("slot ", s, " position ", pos, " token ", token,
                 ": max |logit - reference| / max(1, |reference|) = ", err, " > ", kDataTolerance));
}

// Reads the ledger's storage, never the plan's: a stale plan that writes
// and reads its own old buffer is self-consistent and may produce the right
// logits, but the storage the cache really holds then misses the row.
void Simulator::check_kv(int s, int pos) {
    const Slot& slot = slots_[s];
    const ReferenceKv& want = *slot.request->shadow;
    const int kv_dim = config_.model.kv_dim();
    for (std::size_t l = 0; l < slot.cache->ledger.storage.size(); ++l) {
        KvStorage& got = *slot.cache->ledger.storage[l];
        if (got.device()) got.device()->download(got, pos, 1);  // compare what the device holds
        const double err = std::max(logit_error(row_of(got.key_row(pos), kv_dim), row_of(want.key[l], pos, kv_dim)),
                                    logit_error(row_of(got.value_row(pos), kv_dim), row_of(want.value[l], pos, kv_dim)));
        stats_.max_kv_error = std::max(stats_.max_kv_error, err);
        if (!(err <= kDataTolerance))
            fail(Verdict::stale_decode, Oracle::kv,
                 cat("slot ", s, " position ", pos, " layer ", l, ": the storage the cache holds (serial ",
                     got.serial().get(), ") has K/V error ", err, " > ", kDataTolerance,
                     " against the reference: the decode wrote somewhere else"));
    }
}

void Simulator::check_weld(int s) {
    const Slot& slot = slots_[s];
    const std::vector<StorageSerial> bound = slot.session.bound_serials();
    const std::vector<StorageSerial> want = slot.cache->ledger.serials();
    if (bound == want) return;
    std::string layers;
    for (std::size_t l = 0; l < want.size(); ++l)
        if (l >= bound.size() || bound[l] != want[l]) layers += cat(layers.empty() ? "" : ",", l);
    fail(Verdict::stale_decode, Oracle::weld,
         cat("slot ", s, ": the plan is welded to storage the cache no longer holds, in layer(s) ",
             layers, " of ", want.size()));
}

// The counters are the engine's own report; the plan serial is a second
// report they must agree with: a counted build mints a plan identity the
// run has never seen, a rebind or a keep leaves it as it was.
void Simulator::check_plan_identity(int s, const SessionCounters& before, PlanSerial before_serial) {
    const DecodeSession& session = slots_[s].session;
    const PlanSerial now = session.plan_serial();
    const bool counted_build = session.counters().builds != before.builds;
    const bool new_plan = now != before_serial;
    if (new_plan && !plan_serials_.insert(now).second)
        fail(Verdict::engine_error, Oracle::accounting,
             cat("slot ", s, ": the plan's serial ", now.get(), " was seen before in this run"));
    if (counted_build == new_plan) return;
    fail(Verdict::engine_error, Oracle::accounting,
         cat("slot ", s, ": the session's counters say ", counted_build ? "build" : "rebind or keep",
             " but the plan's identity ", new_plan ? "changed" : "did not change",
             ": the counters do not describe what the engine did"));
}

void Simulator::check_accounting(int s, const SessionCounters& before, bool justified_build,
                                 bool justified_rebind) {
    const SessionCounters& after = slots_[s].session.counters();
    const auto builds = after.builds - before.builds;
    const auto rebinds = after.rebinds - before.rebinds;
    if (builds == std::uint64_t(justified_build) && rebinds == std::uint64_t(justified_rebind)) return;
    const bool spurious = builds > std::uint64_t(justified_build) ||
                          builds + rebinds > std::uint64_t(justified_build + justified_rebind);
    ++(spurious ? stats_.spurious : stats_.missed);
    if (!oracles_.accounting) return;
    auto what = [](bool build, bool rebind) {
        return build ? "build" : rebind ? "rebind" : "keep";
    };
    fail(spurious ? Verdict::spurious_invalidation : Verdict::missed_invalidation,
         Oracle::accounting,
         cat("slot ", s, ": the engine chose ", what(builds > 0, rebinds > 0), " where the op log justifies ",
             what(justified_build, justified_rebind)));
}

// After every op: the simulator's own bookkeeping agrees with itself and
// with the cache (a disagreement is a bug in kvweld, not in the engine).
void Simulator::check_invariants(int s) const {
    const Slot& slot = slots_[static_cast<std::size_t>(s)];
    if (!slot.cache) return;
    KVWELD_ASSERT(slot.cache->ledger.storage.size() == static_cast<std::size_t>(config_.model.n_layers));
    // The scheduler fault keeps a rejected row on purpose (history and cache disagree).
    if (slot.request && !fault_on(Fault::spec_reject_off_by_one))
        KVWELD_ASSERT(slot.request->history.size() == static_cast<std::size_t>(slot.cache->cache.cached_len()));
}

void Simulator::update_plan_model(Slot& slot) {
    PlanModel& p = slot.plan;
    p.model_generation = model_generation_;
    p.weights_generation = weights_generation_;
    if (p.exists && p.cache_generation == slot.cache->generation) return;
    p.exists = true;
    p.cache_generation = slot.cache->generation;
    p.capacity = slot.cache->cache.geometry().max_seq_len;
    p.storage = slot.cache->ledger.storage;
}

}  // namespace kvweld::sim
