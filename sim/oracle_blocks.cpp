// The block ledger and the pool weld, for paged engines (KVWELD_CAP_BLOCKS)
// the registry gives a block model: the model follows the calls alone (the
// op log), and the engine's tables, counts and pool reports are judged
// against it. Not judging (unchecked), the model still follows the pool:
// it paces the traffic's growth.
#include "sim/observers.hpp"

#include "util/overloaded.hpp"

#include "util/cat.hpp"

#include <map>

namespace kvweld::sim {

using namespace targets;

BlockLedger::BlockLedger(const World& world, Judge& judge, BlockModel model, std::set<std::uint64_t>& seen_serials,
                         bool judging)
    : world_(world), judge_(judge), model_(std::move(model)), seen_serials_(seen_serials), judging_(judging),
      pool_storage_(world.engine.pool_info().storage) {}  // the first report is the pool's birth

void BlockLedger::on_call(const MemoryCall& call) {
    std::visit(Overloaded{
                   [&](const calls::Truncate& c) { model_.truncate(c.seq, c.n); },
                   [&](const calls::Clear& c) { model_.clear(c.seq); },
                   [&](const calls::Keep& c) {
                       for (int s : c.emptied) model_.clear(s);
                   },
                   [&](const calls::Copy& c) { model_.fork(c.src, c.dst); },
                   [&](const calls::Close& c) { model_.close(c.seq); },
                   [&](const calls::ClearAll&) { model_.clear_all(); },
                   [&](const calls::Reload&) { model_.clear_all(); },
                   [&](const calls::PoolOp& c) {
                       if (c.op == KVWELD_POOL_GROW) model_.grow();
                       if (c.op == KVWELD_POOL_RESET) model_.reset();
                   },
                   IgnoredCalls{},  // observers.hpp: block tables move only by the calls above
               },
               call);
}

void BlockLedger::on_decode(Decoded& d) {
    for (int s : d.batch.seqs) model_.append(s);
    check(true);
}

void BlockLedger::after_op(OpKind) { check(false); }

// The pool weld: the pool's storage must be new (never seen) exactly when
// the model says it was replaced (a grow or a reset), and right after a
// decode the held plan must read and write that storage.
void BlockLedger::check(bool decoded) {
    if (!judging_) return;
    const kvweld_pool_info info = world_.engine.pool_info();
    std::map<int, std::vector<int>> tables;
    for (int s = 0; s < world_.config.seqs; ++s)
        if (world_.open(s)) tables[s] = world_.engine.block_table(s);
    const auto refcount = [&](int block) { return world_.engine.block_refcount(block); };
    const std::string op = std::string(to_string(judge_.op_kind()));
    if (const auto problem = model_.mismatch(tables, refcount, info.n_blocks, info.free_blocks))
        judge_.fail(Verdict::stale_decode, Oracle::blocks, cat("after ", op, ": ", *problem));
    const bool replaced = model_.replacements() != replacements_;
    if (replaced && (info.storage == 0 || info.storage == pool_storage_ || seen_serials_.count(info.storage)))
        judge_.fail(Verdict::engine_error, Oracle::ledger,
                    cat("the pool's storage was replaced (", model_.n_blocks(), " blocks, by a ", op,
                        ") but it reports storage ", info.storage, ", which this run has seen before"));
    if (!replaced && info.storage != pool_storage_)
        judge_.fail(Verdict::engine_error, Oracle::ledger,
                    cat("the pool's storage changed from ", pool_storage_, " to ", info.storage, " in a ", op,
                        ", which keeps it"));
    seen_serials_.insert(pool_storage_);
    pool_storage_ = info.storage;
    replacements_ = model_.replacements();
    if (decoded && info.plan_storage != pool_storage_)
        judge_.fail(Verdict::stale_decode, Oracle::weld,
                    cat("the held plan reads and writes pool storage ", info.plan_storage, " but the pool's is ",
                        pool_storage_, " (the pool ledger)"));
}

}  // namespace kvweld::sim
