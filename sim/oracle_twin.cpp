// The twin oracle: a second instance of the same engine (same settings,
// same fault switches, same model), created with plan reuse turned off
// (the engine declares the setting, ABI 6 no_reuse_param: kvweld reuse=0,
// llama.cpp graph_reuse=0), driven in lockstep (lockstep.cpp). Every row
// the engine returns must equal the twin's bit for bit (or, in a state
// where the engine declares it is not bitwise reproducible across
// instances, ABI 6 twin_tolerance, lie within that tolerance from then on,
// counted apart): a plan that is rebuilt for every token cannot be stale,
// so a difference is a stale plan by construction, whatever feature caused
// it, including features the reference forward does not model. Trusts
// nothing but the two engines' rows; what the twin says about itself is
// never read.
#include "sim/observers.hpp"

#include "engine/reference.hpp"
#include "targets/registry.hpp"
#include "util/cat.hpp"

#include <cmath>
#include <cstring>

namespace kvweld::sim {

using namespace targets;

std::unique_ptr<Engine> open_no_reuse(const World& world, const std::string& faults, std::string& why_not) {
    const EngineChoice& e = world.config.engine;
    const auto params = twin_params(e.engine, e.params, why_not);
    if (!params) return nullptr;
    EngineSetup setup = world.config.setup();
    setup.params = *params;
    return open_engine(e.engine, faults, setup, world.model);
}

// On where asked, where the reference cannot follow the engine's settings,
// and where the engine's reuse rule does not apply to its release.
std::unique_ptr<Lockstep> open_twin(const World& world, Judge& judge, RunStats& stats, OracleReport& oracles) {
    const EngineChoice& e = world.config.engine;
    const bool unruled = !rule_gap(world.engine.name(), engine_build(e.engine), e.params).empty();
    if (!e.twin && oracles.data && !unruled) {
        oracles.twin_why_not = "not asked for: --twin runs the engine again with plan reuse off, at about three times the cost";
        return nullptr;
    }
    auto twin = open_no_reuse(world, e.faults, oracles.twin_why_not);
    if (!twin) return nullptr;
    oracles.twin = true;
    return std::make_unique<Lockstep>(world, judge, stats, std::move(twin), Lockstep::Role::twin, 0.0, false);
}

void Lockstep::compare_twin(Decoded& d, const std::vector<float>& want) {
    const std::vector<float>& got = d.got;
    const auto v = std::size_t(world_.config.model.vocab);
    // Sticky: rows computed in such a state stay in the KV and tell on every
    // later row that attends to them.
    if (const TwinTolerance now = world_.engine.twin_tolerance(); now.tolerance > 0) twin_tolerance_ = now;
    const TwinTolerance& tolerance = twin_tolerance_;
    std::size_t row = 0;  // the rows are the output pairs'
    for (const Pair& pair : d.batch.pairs) {
        if (!pair.output) continue;
        const std::size_t i = row++;
        if (chained(pair)) continue;
        ++stats_.twin_rows;
        if (std::memcmp(got.data() + i * v, want.data() + i * v, v * sizeof(float)) == 0) continue;
        const auto slice = [&](const std::vector<float>& rows) { return std::span<const float>(rows).subspan(i * v, v); };
        if (tolerance.tolerance > 0 && logit_error(slice(got), slice(want)) <= tolerance.tolerance) {
            ++stats_.twin_within_tolerance;
            continue;
        }
        double worst = 0.0;
        for (std::size_t k = 0; k < v; ++k) {
            const double diff = std::fabs(double(got[i * v + k]) - double(want[i * v + k]));
            worst = std::isfinite(diff) ? std::max(worst, diff) : 1e300;
        }
        judge_.fail_in_call(
            Verdict::stale_decode, Oracle::twin,
            cat("sequence ", pair.seq, " position ", pair.pos, " (row ", i, " of ", got.size() / v,
                " in the call): the row differs from the twin's (the engine with plan reuse off) by up to ", worst,
                tolerance.why ? cat(" (past the engine's tolerance ", tolerance.tolerance, ": ", tolerance.why, ")")
                              : std::string()));
    }
}

}  // namespace kvweld::sim
