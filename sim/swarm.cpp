#include "sim/swarm.hpp"

#include "engine/cat.hpp"
#include "sim/report.hpp"
#include "sim/seed_pool.hpp"
#include "sim/serve/paged_seed.hpp"

#include <cstdio>

namespace kvweld::sim {

SwarmResult run_swarm(const SwarmOptions& o, const std::function<void(std::size_t, std::size_t)>& progress) {
    const std::size_t n = static_cast<std::size_t>(o.last - o.first) + 1;
    SwarmResult out;
    out.seeds.resize(n);
    run_indexed(
        n, o.jobs,
        [&](std::size_t i) {
            SimConfig config = draw_config(o.first + i, o.draw);
            // The paged design runs with every oracle on; a run with some off stays dense.
            config.paged = config.paged && o.oracles.data && o.oracles.kv && o.oracles.weld && o.oracles.accounting;
            const RunResult r = config.paged ? run_paged_seed(config, o.draw.model, o.steps)
                                             : run_generated(config, o.steps, o.oracles);
            out.seeds[i] = SeedResult{r.config, r.stats, r.verdict, r.failure};
            return r.verdict != Verdict::pass;
        },
        progress);

    for (const SeedResult& s : out.seeds) {
        out.total.add(s.stats);
        out.failures += s.verdict != Verdict::pass;
    }
    return out;
}

std::string swarm_table(const SwarmResult& r, const SwarmOptions& o) {
    const RunStats& t = r.total;
    std::string out = cat("results over seeds ", o.first, "..", o.last, ":\n");
    std::size_t paged = 0;
    for (const SeedResult& s : r.seeds) paged += s.config.paged;
    out += table_row("seeds", cat(r.seeds.size(), " (", r.failures, " failed)"));
    out += table_row("  paged KV (kvweld-paged)", cat(paged, " (the serving simulator, every oracle and the block ledger)"));
    out += table_row("decodes", cat(t.decodes));
    out += table_row("kept / rebound / rebuilt", cat(t.kept, " / ", t.rebound, " / ", t.rebuilt));
    out += table_row("justified kept / rebind / build",
               cat(t.justified_kept, " / ", t.justified_rebinds, " / ", t.justified_builds));
    out += table_row("  builds a capacity change forced", cat(t.capacity_rebuilds));
    out += table_row("spurious", cat(t.spurious));
    out += table_row("missed", cat(t.missed));
    std::size_t stale = 0;
    for (const SeedResult& s : r.seeds) stale += s.verdict == Verdict::stale_decode;
    out += table_row("stale decodes (seeds)", cat(stale));
    out += table_row("reuse ratio (ideal)", cat(fixed(t.reuse_ratio(), 4), " (", fixed(t.ideal_ratio(), 4), ")"));
    out += table_row("change decodes", cat(t.change_decodes));
    out += table_row("  blind to data", cat(t.data_blind));
    out += table_row("  blind to data and kv", cat(t.independent_blind, " (", t.blind_same_weights_reload,
                                              " after a same-weights reload)"));
    out += table_row("max logit / K/V error", cat(sci(t.max_logit_error), " / ", sci(t.max_kv_error)));
    for (const SeedResult& s : r.seeds) {
        if (s.verdict == Verdict::pass) continue;
        out += cat("FAIL seed ", s.config.seed, ": ", to_string(s.verdict));
        if (s.failure)
            out += cat(" at op ", s.failure->op_index, " (", s.failure->op, ", ", to_string(s.failure->oracle),
                       " oracle): ", s.failure->detail);
        out += cat("\n  reproduce: ", reproduce_command(s.config, o.steps, o.draw.model), "\n");
    }
    out += r.failures == 0 ? "swarm verdict: PASS\n" : cat("swarm verdict: FAIL (", r.failures, " seeds)\n");
    return out;
}

}  // namespace kvweld::sim
