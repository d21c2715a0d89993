// The three oracles, run on every decode. None of them consults KvAllocId:
//   data        logits vs the reference forward over the request's own history
//   weld        the plan's bound storage vs the storage the op log says the cache holds
//   accounting  the engine's build/rebind/keep decision vs what the op log justifies
#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvweld::sim {

namespace {

// Data oracle tolerance on logit_error() (engine/reference.hpp). For logits
// of order 1 (all simulated models) this is an absolute 1e-4.
constexpr double kLogitTolerance = 1e-4;

bool rows_equal(const KvStorage& a, const KvStorage& b, int rows) {
    const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(a.kv_dim());
    return std::memcmp(a.key_row(0), b.key_row(0), n * sizeof(float)) == 0 &&
           std::memcmp(a.value_row(0), b.value_row(0), n * sizeof(float)) == 0;
}

}  // namespace

int Simulator::choose(std::span<const float> logits, Rng& chooser) const {
    if (!config_.sampled)
        return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const float max = *std::max_element(logits.begin(), logits.end());
    double total = 0.0;
    for (float l : logits) total += std::exp(double(l - max));
    double u = chooser.unit() * total;
    for (std::size_t i = 0; i < logits.size(); ++i) {
        u -= std::exp(double(logits[i] - max));
        if (u <= 0.0) return static_cast<int>(i);
    }
    return static_cast<int>(logits.size()) - 1;
}

// Would a plan still welded to its old storage have read exactly what the
// live cache holds in rows [0, pos)? Then the data oracle alone is blind here.
bool Simulator::storage_indistinguishable(const Slot& slot, int pos) const {
    const KvCache& cache = slot.cache->cache;
    for (int l = 0; l < cache.n_layers(); ++l) {
        const KvLayer& old = slot.plan.storage[static_cast<std::size_t>(l)];
        const KvLayer& now = cache.layer(l);
        if (old == now) continue;
        // On a device backend the device copy is current; bring it back first.
        for (const KvLayer& s : {old, now})
            if (s->device()) s->device()->download(*s, pos);
        if (!rows_equal(*old, *now, pos)) return false;
    }
    return true;
}

int Simulator::checked_decode(int s, int token, Rng& chooser) {
    Slot& slot = slots_[s];
    Request& r = *slot.request;
    TrackedCache& tc = *slot.cache;
    const int pos = static_cast<int>(r.history.size());

    // What the op log justifies, before the engine decides.
    const PlanModel& plan = slot.plan;
    const bool model_changed = plan.exists && plan.model_generation != model_generation_;
    const bool cache_changed = plan.exists && plan.cache_generation != tc.generation;
    const bool justified_build = !plan.exists || model_changed ||
                                 (cache_changed && config_.rebind_policy == RebindPolicy::rebuild);
    const bool justified_rebind = !justified_build && cache_changed;
    if (model_changed || cache_changed) {
        ++stats_.change_decodes;
        const bool same_weights = !model_changed || plan.weights_generation == weights_generation_;
        const bool same_storage = !cache_changed || storage_indistinguishable(slot, pos);
        if (same_weights && same_storage) ++stats_.indistinguishable;
    }

    const SessionCounters before = slot.session.counters();
    const std::span<const float> logits = slot.session.decode(*model_, tc.cache, token);
    const SessionCounters& after = slot.session.counters();
    ++stats_.decodes;
    stats_.kept += after.kept - before.kept;
    stats_.rebound += after.rebinds - before.rebinds;
    stats_.rebuilt += after.builds - before.builds;
    stats_.justified_builds += justified_build;
    stats_.justified_rebinds += justified_rebind;
    stats_.justified_kept += !justified_build && !justified_rebind;

    if (oracles_.data) check_data(s, token, logits);
    const int next = choose(logits, chooser);
    if (oracles_.weld) check_weld(s);
    check_accounting(s, before, justified_build, justified_rebind);
    r.history.push_back(token);
    update_plan_model(slot);
    return next;
}

void Simulator::check_data(int s, int token, std::span<const float> logits) {
    Request& r = *slots_[s].request;
    const int pos = static_cast<int>(r.history.size());
    const std::vector<float> want = reference_forward(*model_, *r.shadow, token, pos);
    const double err = logit_error(logits, want);
    stats_.max_logit_error = std::max(stats_.max_logit_error, err);
    if (!(err <= kLogitTolerance))
        fail(Verdict::stale_decode, Oracle::data,
             cat("slot ", s, " position ", pos, " token ", token,
                 ": max |logit - reference| / max(1, |reference|) = ", err, " > ", kLogitTolerance));
}

void Simulator::check_weld(int s) {
    const Slot& slot = slots_[s];
    const std::vector<StorageSerial> bound = slot.session.bound_serials();
    const std::vector<StorageSerial>& want = slot.cache->storage;
    if (bound == want) return;
    std::string layers;
    for (std::size_t l = 0; l < want.size(); ++l)
        if (l >= bound.size() || bound[l] != want[l]) layers += cat(layers.empty() ? "" : ",", l);
    fail(Verdict::stale_decode, Oracle::weld,
         cat("slot ", s, ": the plan is welded to storage the cache no longer holds, in layer(s) ",
             layers, " of ", want.size()));
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

void Simulator::update_plan_model(Slot& slot) {
    PlanModel& p = slot.plan;
    p.model_generation = model_generation_;
    p.weights_generation = weights_generation_;
    if (p.exists && p.cache_generation == slot.cache->generation) return;
    p.exists = true;
    p.cache_generation = slot.cache->generation;
    p.storage.clear();
    for (int l = 0; l < slot.cache->cache.n_layers(); ++l) p.storage.push_back(slot.cache->cache.layer(l));
}

}  // namespace kvweld::sim
