// The twin oracle: a second instance of the same engine (same settings,
// same fault switches, same model), created with plan reuse turned off
// (the engine declares the setting, ABI 6 no_reuse_param: kvweld reuse=0,
// llama.cpp graph_reuse=0), driven in lockstep through every memory op.
// Every row the engine returns must equal the twin's bit for bit (or, in a
// state where the engine declares it is not bitwise reproducible across
// instances, ABI 6 twin_tolerance, lie within that tolerance from then on,
// counted apart): a plan
// that is rebuilt for every token cannot be stale, so a difference is a
// stale plan by
// construction, whatever feature caused it, including features the
// reference forward does not model. Trusts nothing but the two engines'
// rows; what the twin says about itself is never read.
#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/reference.hpp"
#include "sim/simulator.hpp"

#include <cmath>
#include <cstring>

namespace kvweld::sim {

void Simulator::open_twin() {
    // On by default where the reference cannot follow the engine's settings,
    // and where the engine's reuse rule does not apply to its release.
    const bool unruled = !rule_gap(engine_->name(), engine_build(config_.engine.engine)).empty();
    if (!config_.engine.twin && oracles_.data && !unruled) {
        oracles_.twin_why_not = "not asked for: --twin runs the engine again with plan reuse off, at about three times the cost";
        return;
    }
    const auto params = twin_params(config_.engine.engine, config_.engine.params, oracles_.twin_why_not);
    if (!params) return;
    EngineSetup setup = config_.setup();
    setup.params = *params;
    second_ = open_engine(config_.engine.engine, config_.engine.faults, setup, model_);
    oracles_.twin = true;
}

std::vector<float> Simulator::check_twin(const std::vector<Pair>& pairs, const std::vector<float>& got) {
    if (!second_ || peer_) return {};  // a peer is compared by check_peer
    std::vector<std::int32_t> seqs, tokens;
    for (const Pair& p : pairs) {
        seqs.push_back(p.seq);
        tokens.push_back(p.token);
    }
    const std::vector<float> want = second_->decode(seqs, tokens, output_flags(pairs));
    require(want.size() == got.size(), "the twin returned ", want.size(), " floats of logits where the engine returned ",
            got.size());
    const auto v = std::size_t(config_.model.vocab);
    // Sticky: rows computed in such a state stay in the KV and tell on every
    // later row that attends to them.
    if (const TwinTolerance now = engine_->twin_tolerance(); now.tolerance > 0)
        twin_tolerance_ = now;
    const TwinTolerance& tolerance = twin_tolerance_;
    std::size_t row = 0;  // the rows are the output pairs'
    for (const Pair& pair : pairs) {
        if (!pair.output) continue;
        const std::size_t i = row++;
        ++stats_.twin_rows;
        if (std::memcmp(got.data() + i * v, want.data() + i * v, v * sizeof(float)) == 0) continue;
        const auto row = [&](const std::vector<float>& rows) { return std::span<const float>(rows).subspan(i * v, v); };
        if (tolerance.tolerance > 0 && logit_error(row(got), row(want)) <= tolerance.tolerance) {
            ++stats_.twin_within_tolerance;
            continue;
        }
        double worst = 0.0;
        for (std::size_t k = 0; k < v; ++k) {
            const double d = std::fabs(double(got[i * v + k]) - double(want[i * v + k]));
            worst = std::isfinite(d) ? std::max(worst, d) : 1e300;
        }
        fail(Verdict::stale_decode, Oracle::twin,
             cat("sequence ", pair.seq, " position ", pair.pos, " (row ", i, " of ", got.size() / v,
                 " in the call): the row differs from the twin's (the engine with plan reuse off) by up to ", worst,
                 tolerance.why ? cat(" (past the engine's tolerance ", tolerance.tolerance, ": ", tolerance.why, ")")
                               : std::string()),
             call_clause());
    }
    return want;
}

}  // namespace kvweld::sim
