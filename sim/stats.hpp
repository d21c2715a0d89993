// What a run counted. Everything here is derived from the seed and the ops
// alone, so the same trace gives the same stats on every run.
#pragma once

#include <cstdint>

namespace kvweld::sim {

struct RunStats {
    std::uint64_t ops_run = 0;
    std::uint64_t ops_skipped = 0;  // precondition did not hold (replay of shrunk traces)
    std::uint64_t requests = 0;
    std::uint64_t decodes = 0;
    // what the engine did
    std::uint64_t kept = 0;
    std::uint64_t rebound = 0;
    std::uint64_t rebuilt = 0;
    // what the op log justified
    std::uint64_t justified_kept = 0;
    std::uint64_t justified_rebinds = 0;
    std::uint64_t justified_builds = 0;
    std::uint64_t capacity_rebuilds = 0;  // of those: a rebind the capacity rules out (rebind policy)
    std::uint64_t spurious = 0;  // plan preparations no change justified
    std::uint64_t missed = 0;    // justified preparations that did not happen
    // Blind spots: decodes right after a storage or model change (the plan
    // was prepared before it) where a plan that missed the change would give
    // the very same logits (data_blind), and also leave the right K/V rows
    // in the storage the cache holds (independent_blind: no oracle that
    // reads data could see it). Of those, how many follow a reload of
    // identical weights with the cache untouched, where a missed plan is
    // exactly right and only the accounting oracle can call it missed.
    std::uint64_t change_decodes = 0;
    std::uint64_t data_blind = 0;
    std::uint64_t independent_blind = 0;
    std::uint64_t blind_same_weights_reload = 0;
    double max_logit_error = 0.0;
    double max_kv_error = 0.0;

    double reuse_ratio() const { return decodes ? double(kept) / double(decodes) : 0.0; }
    double ideal_ratio() const { return decodes ? double(justified_kept) / double(decodes) : 0.0; }

    void add(const RunStats& o) {
        ops_run += o.ops_run;
        ops_skipped += o.ops_skipped;
        requests += o.requests;
        decodes += o.decodes;
        kept += o.kept;
        rebound += o.rebound;
        rebuilt += o.rebuilt;
        justified_kept += o.justified_kept;
        justified_rebinds += o.justified_rebinds;
        justified_builds += o.justified_builds;
        capacity_rebuilds += o.capacity_rebuilds;
        spurious += o.spurious;
        missed += o.missed;
        change_decodes += o.change_decodes;
        data_blind += o.data_blind;
        independent_blind += o.independent_blind;
        blind_same_weights_reload += o.blind_same_weights_reload;
        if (o.max_logit_error > max_logit_error) max_logit_error = o.max_logit_error;
        if (o.max_kv_error > max_kv_error) max_kv_error = o.max_kv_error;
    }
};

}  // namespace kvweld::sim
