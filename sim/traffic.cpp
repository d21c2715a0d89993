#include "sim/traffic.hpp"

#include "engine/faults.hpp"
#include "sim/distributions.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace kvweld::sim {

std::vector<Policy> study_policies() {
    return {{"fresh+rebuild", CachePolicy::fresh, RebindPolicy::rebuild},
            {"fresh+rebind", CachePolicy::fresh, RebindPolicy::rebind},
            {"recycle", CachePolicy::recycle, RebindPolicy::rebind}};
}

namespace {

SimConfig traffic_config(const TrafficParams& t, const Policy& policy) {
    SimConfig c = draw_config(t.seed, {.model = t.model, .backend = Backend::cpu, .faults = {}});
    c.slots = t.slots;
    c.cache_policy = policy.cache;
    c.rebind_policy = policy.on_change;
    c.retire_keeps_cache = true;
    c.sampled = false;
    c.spec_k = t.spec_k;
    c.capacities = {c.model.max_seq_len};  // one capacity: the study measures policies, not sizes
    for (int& w : c.weights) w = 1;  // informational only: the traffic decides the ops
    return c;
}

// Drives one Simulator tick by tick. Every random draw comes from the
// traffic's own PRNG in a fixed order, so each policy sees the same traffic.
class TrafficRun {
public:
    TrafficRun(const TrafficParams& t, const Policy& policy)
        : t_(t), policy_(policy), config_(traffic_config(t, policy)), sim_(config_), rng_(t.seed) {}

    RunResult run() {
        for (int tick = 0; tick < t_.ticks && !failed_; ++tick) step_tick();
        return RunResult{config_, static_cast<int>(ops_.size()), OracleSwitches{}, ops_, sim_.stats(), sim_.verdict(), sim_.failure()};
    }

private:
    void step_tick() {
        const int arrivals = poisson(rng_, t_.arrival_rate);
        for (int i = 0; i < arrivals; ++i) queue_.push_back(draw_request());
        if (rng_.chance(t_.reload_rate)) {
            Op op;
            op.kind = OpKind::reload;
            op.same_weights = !rng_.chance(t_.reload_new_weights);
            op.seed = rng_.next();
            apply(op);
        }
        // Per slot, in slot order: admit, then one decode step or an event.
        for (int s = 0; s < config_.slots && !failed_; ++s) step_slot(s);
    }

    Op draw_request() {
        Op op;
        op.kind = OpKind::admit;
        const int capacity = config_.model.max_seq_len - t_.spec_k - 2;
        const int prompt = std::min(capacity / 2, static_cast<int>(rng_.range(1, 2 * t_.prompt_mean - 1)));
        op.tokens.resize(static_cast<std::size_t>(prompt));
        for (int& tok : op.tokens) tok = static_cast<int>(rng_.below(config_.model.vocab));
        op.max_new = std::min(capacity - prompt, geometric(rng_, t_.output_mean));
        op.accept = static_cast<float>(t_.accept);
        op.seed = rng_.next();
        return op;
    }

    void step_slot(int s) {
        // Draw every event for this slot and tick up front, whatever happens.
        const bool preempt = rng_.chance(t_.preempt_rate);
        const bool offload = rng_.chance(t_.offload_rate);
        const int layer = static_cast<int>(rng_.below(config_.model.n_layers));
        std::vector<int> drafts(static_cast<std::size_t>(std::max(0, t_.spec_k - 1)));
        for (int& d : drafts) d = static_cast<int>(rng_.below(config_.model.vocab));
        int m = 0;
        while (m < t_.spec_k - 1 && rng_.chance(t_.accept)) ++m;

        const Slot& slot = sim_.slot(s);
        if (!slot.request) {
            if (queue_.empty()) return;
            Op admit = queue_.front();
            queue_.erase(queue_.begin());
            admit.fresh = policy_.cache == CachePolicy::fresh;
            admit.pick = pick_of(OpKind::admit, s, 1);
            apply(admit);
            return;
        }
        const Request& r = *slot.request;
        if (r.history.size() >= r.max_len) return apply(slot_op(OpKind::retire, s, 1));
        if (preempt) return apply(slot_op(OpKind::clear, s, 1));
        if (offload) {
            Op op = slot_op(OpKind::set_layer, s, 1);
            op.layer = layer;
            return apply(op);
        }
        const std::vector<int> spec_ok = sim_.eligible(OpKind::spec, t_.spec_k + 1);
        if (t_.spec_k > 1 && std::find(spec_ok.begin(), spec_ok.end(), s) != spec_ok.end()) {
            Op op = slot_op(OpKind::spec, s, t_.spec_k + 1);
            op.tokens = drafts;
            op.m = m;
            return apply(op);
        }
        const std::vector<int> decode_ok = sim_.eligible(OpKind::decode, 1);
        if (std::find(decode_ok.begin(), decode_ok.end(), s) != decode_ok.end())
            return apply(slot_op(OpKind::decode, s, 1));
        apply(slot_op(OpKind::retire, s, 1));  // no room left: the request ends
    }

    Op slot_op(OpKind kind, int s, int room) {
        Op op;
        op.kind = kind;
        op.pick = pick_of(kind, s, room);
        return op;
    }

    // The pick that makes the simulator choose slot s among the eligible.
    std::uint32_t pick_of(OpKind kind, int s, int room) const {
        const std::vector<int> slots = sim_.eligible(kind, room);
        return static_cast<std::uint32_t>(std::find(slots.begin(), slots.end(), s) - slots.begin());
    }

    void apply(const Op& op) {
        ops_.push_back(op);
        failed_ = !sim_.apply(op, ops_.size() - 1);
    }

    TrafficParams t_;
    Policy policy_;
    SimConfig config_;
    Simulator sim_;
    Rng rng_;
    std::vector<Op> queue_;
    std::vector<Op> ops_;
    bool failed_ = false;
};

}  // namespace

PolicyResult run_traffic(const TrafficParams& params, const Policy& policy) {
    ScopedFaults none(FaultSet{});
    return {policy, TrafficRun(params, policy).run()};
}

OpCosts measure_op_costs(const ModelConfig& config) {
    using Clock = std::chrono::steady_clock;
    const Model model = Model::random(config, 1);
    KvCache caches[2] = {KvCache::with_capacity(config), KvCache::with_capacity(config)};
    std::vector<KvLayer> layers[2];
    for (int c = 0; c < 2; ++c)
        for (int l = 0; l < config.n_layers; ++l) layers[c].push_back(caches[c].layer(l));
    auto per_call = [](int n, auto&& fn) {
        const auto start = Clock::now();
        for (int i = 0; i < n; ++i) fn(i);
        return std::chrono::duration<double>(Clock::now() - start).count() / n;
    };
    OpCosts c;
    c.build = per_call(50, [&](int) { make_plan(Backend::cpu, model, caches[0]); });
    const std::unique_ptr<Plan> plan = make_plan(Backend::cpu, model, caches[0]);
    c.rebind = per_call(2000, [&](int i) { plan->rebind(layers[i % 2]); });
    DecodeSession session;
    c.decode = per_call(128, [&](int i) { session.decode(model, caches[1], 1 + i % 3); });
    return c;
}

}  // namespace kvweld::sim
