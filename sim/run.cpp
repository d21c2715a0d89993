#include "sim/run.hpp"

#include "engine/faults.hpp"
#include "sim/distributions.hpp"

#include <algorithm>

namespace kvweld::sim {

namespace {

// The generator's PRNG is separate from the one that drew the config.
constexpr std::uint64_t kOpStream = 0x6f70732d73747265ULL;

std::uint32_t draw32(Rng& rng) { return static_cast<std::uint32_t>(rng.next() >> 32); }

std::vector<int> draw_tokens(Rng& rng, int n, int vocab) {
    std::vector<int> out(static_cast<std::size_t>(n));
    for (int& t : out) t = static_cast<int>(rng.below(static_cast<std::uint64_t>(vocab)));
    return out;
}

// Which op kinds can act now, weighted by the config.
std::optional<OpKind> draw_kind(const Simulator& sim, Rng& rng) {
    const SimConfig& c = sim.config();
    std::array<int, kOpKinds> w{};
    for (int k = 0; k < kOpKinds; ++k) {
        const auto kind = static_cast<OpKind>(k);
        const int room = kind == OpKind::spec ? c.spec_k + 1 : 1;
        const bool can = kind == OpKind::reload || !sim.eligible(kind, room).empty();
        w[k] = can ? c.weights[k] : 0;
    }
    const std::optional<int> k = weighted_index(w, rng);
    return k ? std::optional<OpKind>(static_cast<OpKind>(*k)) : std::nullopt;
}

}  // namespace

Op draw_op(const Simulator& sim, Rng& rng) {
    const SimConfig& c = sim.config();
    Op op;
    // When nothing enabled can act (every request spent its budget), the
    // server retires one, as a real one would.
    op.kind = draw_kind(sim, rng).value_or(OpKind::retire);
    op.pick = draw32(rng);
    op.seed = rng.next();
    switch (op.kind) {
        case OpKind::admit:
            op.tokens = draw_tokens(rng, static_cast<int>(rng.range(1, c.max_prompt)), c.model.vocab);
            op.fresh = c.cache_policy == CachePolicy::fresh ||
                       (c.cache_policy == CachePolicy::mixed && rng.chance(0.5));
            op.accept = std::clamp(c.accept_mean + rng.symmetric(0.25f), 0.0f, 1.0f);
            op.max_new = static_cast<int>(rng.range(0, c.max_new));
            op.pick2 = draw32(rng);
            break;
        case OpKind::spec: {
            op.tokens = draw_tokens(rng, c.spec_k - 1, c.model.vocab);
            const std::vector<int> slots = sim.eligible(OpKind::spec, c.spec_k + 1);
            const float accept = sim.slot(slots[op.pick % slots.size()]).request->accept;
            while (op.m < c.spec_k - 1 && rng.chance(accept)) ++op.m;
            break;
        }
        case OpKind::set_layer: op.layer = static_cast<int>(rng.below(c.model.n_layers)); break;
        case OpKind::truncate: op.length = draw32(rng); break;
        case OpKind::reload: op.same_weights = rng.chance(c.same_weights_chance); break;
        case OpKind::migrate: op.pick2 = draw32(rng); break;
        default: break;
    }
    return op;
}

RunResult run_generated(const SimConfig& config, int steps, OracleSwitches oracles) {
    ScopedFaults faults(config.faults);
    Simulator sim(config, oracles);
    Rng rng(config.seed ^ kOpStream);
    RunResult result{config, steps, oracles, {}, {}, Verdict::pass, std::nullopt};
    for (int i = 0; i < steps; ++i) {
        result.ops.push_back(draw_op(sim, rng));
        if (!sim.apply(result.ops.back(), static_cast<std::size_t>(i))) break;
    }
    result.stats = sim.stats();
    result.verdict = sim.verdict();
    result.failure = sim.failure();
    return result;
}

RunResult run_ops(const SimConfig& config, const std::vector<Op>& ops, int steps,
                  OracleSwitches oracles) {
    ScopedFaults faults(config.faults);
    Simulator sim(config, oracles);
    RunResult result{config, steps, oracles, {}, {}, Verdict::pass, std::nullopt};
    for (std::size_t i = 0; i < ops.size(); ++i) {
        result.ops.push_back(ops[i]);
        if (!sim.apply(ops[i], i)) break;
    }
    result.stats = sim.stats();
    result.verdict = sim.verdict();
    result.failure = sim.failure();
    return result;
}

}  // namespace kvweld::sim
