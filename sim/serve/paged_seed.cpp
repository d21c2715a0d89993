#include "sim/serve/paged_seed.hpp"

#include "engines/registry.hpp"
#include "sim/serve/serve_run.hpp"

namespace kvweld::sim {

ServeConfig paged_seed_config(std::uint64_t seed, const std::string& model) {
    const EngineChoice engine{"kvweld-paged", "", ""};
    return draw_serve_config(seed, engine, model, engine_library(engine.engine)->api().capabilities);
}

// Rows are decodes; the paged rule's builds and rebinds are exact, so on a
// passing seed what the engine did is what the op log justified.
RunResult run_paged_seed(const SimConfig& config, const std::string& model, int steps) {
    const ServeResult r = run_serve_generated(paged_seed_config(config.seed, model), steps);
    RunStats s;
    s.ops_run = r.stats.ops_run;
    s.ops_skipped = r.stats.ops_skipped;
    s.requests = r.stats.requests;
    s.decodes = r.stats.plans;
    s.kept = r.stats.reused;
    s.rebound = r.stats.rebinds;
    s.rebuilt = r.stats.builds;
    s.justified_kept = r.stats.must_reuse;
    s.justified_rebinds = r.stats.rebinds;
    s.justified_builds = r.stats.builds;
    s.max_logit_error = r.stats.max_logit_error;
    s.max_kv_error = r.stats.max_kv_error;
    return RunResult{config, steps, OracleSwitches{}, {}, s, r.verdict, r.failure};
}

}  // namespace kvweld::sim
