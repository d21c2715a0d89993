#include "sim/traffic.hpp"

#include "util/cat.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"
#include "kvweld/engine_abi.h"
#include "sim/distributions.hpp"
#include "sim/report.hpp"
#include "targets/registry.hpp"

#include <chrono>

#include <algorithm>

namespace kvweld::sim {

namespace {
constexpr NameTable<AdapterSwitch, 2> kAdapterSwitches{{{AdapterSwitch::set, "set"}, {AdapterSwitch::scales, "scales"}}};
constexpr NameTable<TrafficMode, 2> kTrafficModes{{{TrafficMode::churn, "churn"}, {TrafficMode::steady, "steady"}}};
}  // namespace

std::string_view to_string(TrafficMode m) { return name_in(kTrafficModes, m); }
TrafficMode traffic_mode_from_string(std::string_view s) { return parse_in(kTrafficModes, s, "traffic mode"); }

std::string_view to_string(AdapterSwitch s) { return name_in(kAdapterSwitches, s); }
AdapterSwitch adapter_switch_from_string(std::string_view s) { return parse_in(kAdapterSwitches, s, "adapter switch"); }

namespace {

SimConfig traffic_serve_config(const TrafficParams& t, const EngineChoice& engine, int chunk) {
    SimConfig c = draw_config(t.seed, engine, t.model, engine_capabilities(engine.engine));
    c.seqs = t.slots;
    c.n_ctx = std::min(c.model.max_seq_len, kMaxDrawnCtx);
    c.max_chunk = std::max({chunk, t.spec_k, t.mode == TrafficMode::steady ? t.token_budget : 0});
    c.sampled = false;
    c.accept_mean = float(t.accept);
    for (int& w : c.weights) w = 1;  // informational only: the traffic decides the ops
    c.capacities.clear();            // every sequence n_ctx positions
    return c;
}

// Drives one Simulator tick by tick. Every draw comes from the
// traffic's own PRNG in a fixed order, so every engine and setting sees
// the same traffic.
class EngineTraffic {
public:
    EngineTraffic(const TrafficParams& t, const EngineChoice& engine, int chunk)
        : t_(t), chunk_(chunk), sim_(traffic_serve_config(t, engine, chunk)), rng_(t.seed) {}

    TrafficResult run() {
        const BlockModel* blocks = sim_.block_model();
        if (blocks) pool_ = {true, blocks->block_size(), blocks->n_blocks(), 0, 0, 0.0, 0, 0, 0};
        for (int tick = 0; tick < t_.ticks && !failed_; ++tick) step_tick();
        if (blocks) {
            pool_.end_blocks = blocks->n_blocks();
            pool_.grows = blocks->grows();
            pool_.utilisation = steps_ ? utilisation_ / double(steps_) : 0.0;
        }
        const RunResult r{sim_.config(), int(ops_.size()), ops_, sim_.stats(), sim_.oracles(), sim_.verdict(),
                            sim_.failure()};
        return {r, sim_.decode_seconds(), sim_.shapes(), pool_};
    }

private:
    void step_tick() {
        const int arrivals = poisson(rng_, t_.arrival_rate);
        for (int i = 0; i < arrivals; ++i) waiting_.push_back(draw_request());
        if (t_.mode == TrafficMode::steady) return steady_tick();
        if (rng_.chance(t_.reload_rate)) {
            ops::Reload reload{.same_weights = !rng_.chance(t_.reload_new_weights)};
            reload.seed = rng_.next();
            if (!sim_.eligible(OpKind::reload).empty()) apply({reload});  // drawn either way: the same traffic
        }
        for (int s = 0; s < sim_.config().seqs && !failed_; ++s) {
            // Drawn whatever happens, so every engine sees the same traffic.
            const bool preempt = rng_.chance(t_.preempt_rate);
            const bool offload = rng_.chance(t_.offload_rate);
            const int layer = int(rng_.below(std::uint64_t(sim_.config().model.n_layers)));
            const auto& r = sim_.request(s);
            if (!r && !waiting_.empty() && !fits(waiting_.front().prompt.size())) {
                ++pool_.waits;  // no blocks for its prompt yet: it waits
            } else if (!r && !waiting_.empty()) {
                ops::Admit admit = waiting_.front();
                waiting_.erase(waiting_.begin());
                admit.pick = pick_of(OpKind::admit, s);
                apply({admit});
                admitted_[s] = ++admissions_;
                adapter_of_[s] = waiting_adapter_.front();
                waiting_adapter_.erase(waiting_adapter_.begin());
            } else if (r && r->done()) {
                apply({ops::Retire{pick_of(OpKind::retire, s)}});
            } else if (r && preempt && !r->history.empty()) {
                preempt_seq(s);
            } else if (r && offload && !sim_.eligible(OpKind::swap_layer).empty()) {
                apply({ops::SwapLayer{pick_of(OpKind::swap_layer, s), layer}});
            }
        }
        ops::Step step;
        step.seed = rng_.next();
        make_room();
        for (int s = 0; s < sim_.config().seqs; ++s) step.wants.push_back(wants(s));
        if (t_.adapters == 0) {
            if (!failed_) apply({step});
        } else {
            step_per_adapter(step);
        }
        if (const BlockModel* b = sim_.block_model()) {
            utilisation_ += double(b->in_use()) / double(b->n_blocks());
            ++steps_;
        }
    }

    // Steady mode: slots admit and retire; the step carries every decode
    // (spec_k tokens each) and then prefill chunks within the token budget.
    void steady_tick() {
        for (int s = 0; s < sim_.config().seqs && !failed_; ++s) {
            const auto& r = sim_.request(s);
            if (r && r->done()) apply({ops::Retire{pick_of(OpKind::retire, s)}});
            if (!sim_.request(s) && !waiting_.empty() && fits(waiting_.front().prompt.size())) {
                ops::Admit admit = waiting_.front();
                waiting_.erase(waiting_.begin());
                admit.pick = pick_of(OpKind::admit, s);
                apply({admit});
                admitted_[s] = ++admissions_;
                adapter_of_[s] = waiting_adapter_.front();
                waiting_adapter_.erase(waiting_adapter_.begin());
            }
        }
        ops::Step step;
        step.seed = rng_.next();
        make_room();
        step.wants = budgeted_wants();
        if (failed_) return;
        if (t_.adapters == 0) apply({step});
        else step_per_adapter(step);
        if (const BlockModel* b = sim_.block_model()) {
            utilisation_ += double(b->in_use()) / double(b->n_blocks());
            ++steps_;
        }
    }

    std::vector<int> budgeted_wants() const {
        const int n = sim_.config().seqs;
        std::vector<int> out(std::size_t(n), 0);
        int budget = t_.token_budget;
        for (int s = 0; s < n; ++s)
            if (const auto& r = sim_.request(s); r && !r->done() && r->decoding && t_.spec_k <= budget) {
                out[std::size_t(s)] = t_.spec_k;
                budget -= t_.spec_k;
            }
        std::vector<int> by_arrival;
        for (int s = 0; s < n; ++s)
            if (const auto& r = sim_.request(s); r && !r->done() && !r->decoding) by_arrival.push_back(s);
        std::sort(by_arrival.begin(), by_arrival.end(), [&](int a, int b) { return admitted_.at(a) < admitted_.at(b); });
        for (int s : by_arrival) {  // as much of each prompt as the budget leaves (vLLM's chunked prefill)
            const int k = std::min(int(sim_.request(s)->queue.size()), budget);
            out[std::size_t(s)] = std::max(0, k);
            budget -= std::max(0, k);
        }
        return out;
    }

    // One call per adapter in use (the base model is adapter -1), each after
    // the adapters that serve it are set: what a server with one context
    // does for a batch of requests on several LoRAs.
    void step_per_adapter(const ops::Step& step) {
        for (int a = -1; a < t_.adapters && !failed_; ++a) {
            ops::Step group = step;
            group.seed = step.seed + std::uint64_t(a + 1);
            bool any = false;
            for (int s = 0; s < sim_.config().seqs; ++s) {
                if (adapter_of_[s] != a) group.wants[std::size_t(s)] = 0;
                any = any || group.wants[std::size_t(s)] > 0;
            }
            if (!any) continue;
            apply({adapters_for(a)});
            if (!failed_) apply({group});
        }
    }

    ops::Lora adapters_for(int a) const {
        ops::Lora op;
        for (int i = 0; i < t_.adapters; ++i) {
            if (t_.adapter_switch == AdapterSwitch::set && i != a) continue;
            op.adapters.push_back(i);
            op.scales.push_back(i == a ? 1.0f : 0.0f);
        }
        return op;
    }

    int wants(int s) const {
        const auto& r = sim_.request(s);
        if (t_.mode == TrafficMode::steady) return !r || r->done() ? 0 : budgeted_wants()[std::size_t(s)];
        return !r || r->done() ? 0 : r->decoding ? t_.spec_k : chunk_;
    }

    // Blocks the next step takes for sequence s (the traffic never forks,
    // so no block is shared and none is copied on write).
    int blocks_needed(int s) const {
        const auto& r = sim_.request(s);
        const int b = sim_.block_model()->block_size(), len = int(r->history.size());
        const int k = std::min({wants(s), int(r->queue.size()) + (r->decoding ? t_.spec_k - 1 : 0),
                                sim_.config().n_ctx - len});
        return (len + k + b - 1) / b - (len + b - 1) / b;
    }

    bool fits(std::size_t prompt) const {
        const BlockModel* b = sim_.block_model();
        if (!b) return true;
        return int((prompt + std::size_t(b->block_size()) - 1) / std::size_t(b->block_size())) <=
               b->n_blocks() - b->in_use();
    }

    // Preempts the most recently admitted requests until the step's blocks
    // fit, keeping at least one running (a lone one that does not fit makes
    // the engine grow its pool).
    void make_room() {
        const BlockModel* b = sim_.block_model();
        if (!b) return;
        for (;;) {
            int need = 0, running = 0;
            for (int s = 0; s < sim_.config().seqs; ++s)
                if (wants(s) > 0) need += blocks_needed(s), ++running;
            if (need <= b->n_blocks() - b->in_use() || running <= 1 || failed_) return;
            int victim = -1;
            for (int s = 0; s < sim_.config().seqs; ++s)
                if (wants(s) > 0 && !sim_.request(s)->history.empty() && (victim < 0 || admitted_[s] > admitted_[victim]))
                    victim = s;
            if (victim < 0) return;
            preempt_seq(victim);
            ++pool_.pool_preemptions;
        }
    }

    void preempt_seq(int s) {
        apply({ops::Preempt{pick_of(OpKind::preempt, s)}});
        ++pool_.preemptions;
    }

    ops::Admit draw_request() {
        const int n_ctx = sim_.config().n_ctx;
        const int capacity = n_ctx - t_.spec_k - 2;
        ops::Admit op;
        const bool steady = t_.mode == TrafficMode::steady;
        const int prompt = steady ? std::min(capacity * 3 / 4, lognormal(rng_, t_.prompt_mean, 1.0))
                                  : std::min(capacity / 2, int(rng_.range(1, 2 * t_.prompt_mean - 1)));
        op.prompt.resize(std::size_t(prompt));
        for (int& tok : op.prompt) tok = int(rng_.below(std::uint64_t(sim_.config().model.vocab)));
        const int output = steady ? std::min(lognormal(rng_, t_.output_mean, 1.0), geometric(rng_, 2.0 * t_.output_mean))
                                  : geometric(rng_, t_.output_mean);
        op.max_new = std::min(capacity - prompt, output);
        op.recycle = t_.recycle;
        // Drawn only with adapters: the traffic without them is as it was.
        waiting_adapter_.push_back(t_.adapters ? int(rng_.below(std::uint64_t(t_.adapters) + 1)) - 1 : -1);
        return op;
    }

    // The pick that makes the simulator choose sequence s among the eligible.
    std::uint32_t pick_of(OpKind kind, int s) const {
        const std::vector<int> seqs = sim_.eligible(kind);
        return std::uint32_t(std::find(seqs.begin(), seqs.end(), s) - seqs.begin());
    }

    void apply(const Op& op) {
        ops_.push_back(op);
        failed_ = !sim_.apply(op, ops_.size() - 1);
    }

    TrafficParams t_;
    int chunk_;
    Simulator sim_;
    Rng rng_;
    std::vector<ops::Admit> waiting_;
    std::vector<int> waiting_adapter_;  // each waiting request's adapter (-1: the base model)
    std::map<int, int> adapter_of_;     // sequence -> its request's adapter
    std::vector<Op> ops_;
    bool failed_ = false;
    std::map<int, std::uint64_t> admitted_;  // sequence -> admission order (preempt the newest first)
    std::uint64_t admissions_ = 0;
    PoolStats pool_;
    double utilisation_ = 0.0;
    std::uint64_t steps_ = 0;
};

}  // namespace

std::string describe(const PoolStats& p) {
    return cat("block ", p.block_size, ", ", p.start_blocks, " -> ", p.end_blocks, " blocks (", p.grows,
               p.grows == 1 ? " grow" : " grows", "), utilisation ", fixed(p.utilisation, 3), ", ", p.preemptions,
               " preemptions (", p.pool_preemptions, " for pool room), ", p.waits, " admissions put off");
}

TrafficResult run_traffic(const TrafficParams& traffic, const EngineChoice& engine, int chunk) {
    // Checked before the engine is opened.
    require(traffic.adapters >= 0 && traffic.adapters <= kLoraPool, "--adapters ", traffic.adapters,
            ": must be in 0..", kLoraPool);
    require(traffic.adapters == 0 || (engine_capabilities(engine.engine) & KVWELD_CAP_LORA), "--adapters ",
            traffic.adapters, ": engine ", engine.engine, " takes no LoRA adapters (no KVWELD_CAP_LORA)");
    return EngineTraffic(traffic, engine, chunk).run();
}

namespace {

// Seconds for `calls` one-token decodes of sequence 0 at position 0; the
// reuse counter's increase in *reused.
double time_same_shape(Engine& engine, int calls, std::uint64_t* reused) {
    const auto before = engine.counters();
    const std::vector<std::int32_t> seqs{0}, tokens{1};
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
        engine.decode(seqs, tokens);
        engine.apply(targets::calls::Truncate{0, 0});
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto after = engine.counters();
    require(before && after, "engine ", engine.name(), " has no counters: cannot check what it measured");
    *reused = after->reused - before->reused;
    return secs;
}

}  // namespace

double measure_build_seconds(const EngineChoice& reuse, const EngineChoice& no_reuse, const std::string& model,
                             int calls, int repeat) {
    SimConfig c = draw_config(1, reuse, model, 0);
    c.seqs = 1;
    c.n_ctx = std::min(c.model.max_seq_len, 64);
    const Model weights = Model::random(c.model, c.weights_seed);
    const std::unique_ptr<Engine> kept = open_engine(c.engine.engine, "", c.setup(), weights);
    c.engine = no_reuse;
    const std::unique_ptr<Engine> built = open_engine(c.engine.engine, "", c.setup(), weights);
    kept->apply(targets::calls::Open{0});
    built->apply(targets::calls::Open{0});
    double best_kept = 1e300, best_built = 1e300;
    for (int r = 0; r < repeat; ++r) {  // alternating, so drift hits both alike
        std::uint64_t kept_reused = 0, built_reused = 0;
        best_kept = std::min(best_kept, time_same_shape(*kept, calls, &kept_reused));
        best_built = std::min(best_built, time_same_shape(*built, calls, &built_reused));
        require(kept_reused >= std::uint64_t(calls - 1) && built_reused == 0, "measuring a build: the engine with reuse "
                "reused ", kept_reused, " of ", calls, " calls and the one without ", built_reused,
                ": the measurement would not be what it says");
    }
    return (best_built - best_kept) / calls;
}

}  // namespace kvweld::sim
