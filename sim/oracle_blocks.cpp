// The block ledger and the pool weld of the simulator, for paged
// engines (KVWELD_CAP_BLOCKS) the registry gives a block model: the
// expectation is the model the op log alone implies; the engine's tables,
// counts and pool reports are what is judged.
#include "util/cat.hpp"
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace kvweld::sim {

// The pool weld: the pool's storage must be new (never seen) exactly when
// the model says it was replaced (a grow or a reset), and right after a
// decode the held plan must read and write that storage.
void Simulator::check_blocks(bool decoded) {
    if (!oracles_.blocks) return;
    const kvweld_pool_info info = engine_->pool_info();
    std::map<int, std::vector<int>> tables;
    for (int s = 0; s < config_.seqs; ++s)
        if (requests_[std::size_t(s)]) tables[s] = engine_->block_table(s);
    const auto refcount = [&](int block) { return engine_->block_refcount(block); };
    if (const auto problem = blocks_->mismatch(tables, refcount, info.n_blocks, info.free_blocks))
        fail(Verdict::stale_decode, Oracle::blocks, cat("after ", to_string(op_kind_), ": ", *problem));
    const bool replaced = blocks_->replacements() != pool_replacements_;
    if (replaced && (info.storage == 0 || info.storage == pool_storage_ || seen_serials_.count(info.storage)))
        fail(Verdict::engine_error, Oracle::ledger,
             cat("the pool's storage was replaced (", blocks_->n_blocks(), " blocks, by a ", to_string(op_kind_),
                 ") but it reports storage ", info.storage, ", which this run has seen before"));
    if (!replaced && info.storage != pool_storage_)
        fail(Verdict::engine_error, Oracle::ledger,
             cat("the pool's storage changed from ", pool_storage_, " to ", info.storage, " in a ",
                 to_string(op_kind_), ", which keeps it"));
    seen_serials_.insert(pool_storage_);
    pool_storage_ = info.storage;
    pool_replacements_ = blocks_->replacements();
    if (decoded && info.plan_storage != pool_storage_)
        fail(Verdict::stale_decode, Oracle::weld,
             cat("the held plan reads and writes pool storage ", info.plan_storage, " but the pool's is ",
                 pool_storage_, " (the pool ledger)"));
}

}  // namespace kvweld::sim
