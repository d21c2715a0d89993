// The ledger and the weld oracle, for engines that report storage
// identity (KVWELD_CAP_STORAGE). They trust the engine's storage reports
// only as checked here, and the rule's word on which ops may replace
// storage.
//
// The ledger is the simulator's own record of the storage each sequence
// slot holds (kept across requests: a slot may keep its storage). It takes
// the engine's report only right after a call, and only as the engine's
// rule says the call may change it (ReuseRule::storage_effect): a
// replacement must show serials the run has never seen, distinct across
// layers, in exactly the layers replaced; a call that keeps storage must
// show the same serials. Serials are never recycled (the ABI's promise),
// so storage kept behind a "replacement" is caught. The weld oracle then
// compares the storage the held plan reads and writes with the ledger's.
//
// White box, the ledger holds the storage objects the serials it accepted
// name (what the kv oracle and the blindness counts read, never what the
// engine reports later), and every row a sequence no longer holds is
// poisoned.
#include "sim/observers.hpp"

#include "util/overloaded.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace kvweld::sim {

using namespace targets;

namespace {


std::string serials_text(const std::vector<std::uint64_t>& s) {
    std::string out;
    for (std::uint64_t v : s) out += cat(out.empty() ? "" : " ", v);
    return out;
}

}  // namespace

StorageLedger::StorageLedger(const World& world, Judge& judge, const ReuseRule* rule, WhiteBox* white_box,
                             std::set<std::uint64_t>& seen_serials, bool weld)
    : world_(world), judge_(judge), rule_(rule), white_box_(white_box), seen_serials_(seen_serials), weld_(weld),
      slots_(std::size_t(world.config.seqs)) {}

void StorageLedger::on_call(const MemoryCall& call) {
    const auto every_open = [&](SeqOp op) {
        for (int s = 0; s < world_.config.seqs; ++s)
            if (world_.open(s)) after(op, s);
    };
    std::visit(Overloaded{
                   [&](const calls::Open& c) { after(SeqOp::open, c.seq); },
                   [&](const calls::OpenSized& c) {
                       if (c.recycle) poison(c.seq, 0);  // every row is dead again
                       after(c.recycle ? SeqOp::recycle : SeqOp::open, c.seq);
                   },
                   [&](const calls::Truncate& c) {
                       poison(c.seq, c.n);
                       if (!c.drafts) after(SeqOp::truncate, c.seq);
                   },
                   [&](const calls::Clear& c) { after(SeqOp::clear, c.seq); },
                   [&](const calls::Keep& c) {
                       for (int s : c.emptied) after(SeqOp::clear, s);
                   },
                   [&](const calls::Copy& c) { after(SeqOp::copy_into, c.dst); },
                   [&](const calls::ClearAll&) { every_open(SeqOp::clear); },
                   [&](const calls::Reload&) { every_open(SeqOp::reload); },
                   [&](const calls::PoolOp& c) {
                       if (c.op == KVWELD_POOL_RESET) every_open(SeqOp::clear);
                   },
                   [&](const calls::SwapLayer& c) { after(SeqOp::swap_layer, c.seq, c.layer); },
                   [&](const calls::Migrate& c) {  // the ledger moves with the request
                       slots_[std::size_t(c.to)] = std::move(slots_[std::size_t(c.from)]);
                       slots_[std::size_t(c.from)] = Slot{};
                       after(SeqOp::migrate, c.to);
                   },
                   [&](const calls::Shift& c) {
                       poison(c.seq, c.len - (c.p1 - c.p0));
                       after(SeqOp::shift, c.seq);
                   },
                   [&](const calls::Load& c) {
                       poison(c.seq, c.len);
                       after(SeqOp::load, c.seq);
                   },
                   IgnoredCalls{},  // observers.hpp: no storage moves under these
               },
               call);
}

void StorageLedger::after(SeqOp op, int seq, std::optional<int> layer) {
    if (!weld_) return;
    Slot& entry = slots_[std::size_t(seq)];
    const int n = world_.config.model.n_layers;
    const std::vector<std::uint64_t> now = world_.engine.storage(seq, KVWELD_STORAGE_HELD, n);
    const bool fresh = entry.serials.empty();  // nothing recorded yet: a slot's first storage
    const StorageEffect effect = fresh ? StorageEffect::replaces
                                 : rule_ ? rule_->storage_effect(op)
                                         : default_storage_effect(op);
    std::vector<std::uint64_t> accepted = fresh ? std::vector<std::uint64_t>(std::size_t(n), 0) : entry.serials;
    std::set<std::uint64_t> mine;
    for (int l = 0; l < n; ++l) {
        const std::uint64_t s = now[std::size_t(l)], was = accepted[std::size_t(l)];
        const bool affected = !layer || *layer == l;
        const bool changed = s != was;
        std::string problem;
        if (!affected || effect == StorageEffect::keeps) {
            if (changed) problem = cat("changed from ", was, " to ", s, " in an op that keeps it");
        } else if (effect == StorageEffect::replaces && !changed) {
            problem = cat("kept serial ", s, " in an op that replaces it");
        }
        if (problem.empty() && changed && (s == 0 || seen_serials_.count(s) || !mine.insert(s).second))
            problem = cat("reports serial ", s, s == 0 ? " (no storage)" : ", which this run has seen before");
        if (!problem.empty())
            judge_.fail(Verdict::engine_error, Oracle::ledger,
                        cat("sequence ", seq, " layer ", l, " after ", to_string(judge_.op_kind()), ": its storage ",
                            problem, " (storage serials now: ", serials_text(now), ")"));
        accepted[std::size_t(l)] = s;
    }
    seen_serials_.insert(mine.begin(), mine.end());
    entry.serials = accepted;
    if (white_box_) pin(seq, now);
}

// White box: the ledger holds the storage objects the serials it accepted
// name; what the engine reports later is never taken instead.
void StorageLedger::pin(int seq, const std::vector<std::uint64_t>& serials) {
    Slot& entry = slots_[std::size_t(seq)];
    const std::vector<KvLayer> held = white_box_->held_layers(seq);
    entry.pinned.resize(held.size());
    for (std::size_t l = 0; l < held.size(); ++l)
        if (!entry.pinned[l] || entry.pinned[l]->serial().get() != serials[l]) {
            require(held[l]->serial().get() == serials[l], "white box: layer ", l, " holds storage ",
                    held[l]->serial().get(), " where the engine reported serial ", serials[l]);
            entry.pinned[l] = held[l];
        }
}

void StorageLedger::poison(int seq, int from) {
    if (!white_box_) return;
    for (const KvLayer& layer : slots_[std::size_t(seq)].pinned) {
        const int end = layer->max_seq_len();
        if (from >= end) continue;
        for (int pos = from; pos < end; ++pos) {
            std::fill_n(layer->key_row(pos), layer->kv_dim(), std::numeric_limits<float>::quiet_NaN());
            std::fill_n(layer->value_row(pos), layer->kv_dim(), std::numeric_limits<float>::quiet_NaN());
        }
        if (layer->device()) layer->device()->upload(*layer, from, end - from);
    }
}

// Weld: when a plan is on the wrong storage it names the storage, where
// the kv oracle would only see the row missing.
void StorageLedger::on_decode(Decoded& d) {
    if (!weld_) return;
    const int n = world_.config.model.n_layers;
    std::set<int> decoded;
    for (const Pair& p : d.batch.pairs) decoded.insert(p.seq);
    for (int seq : decoded) {
        after(SeqOp::decode, seq);  // a decode keeps the storage
        const std::vector<std::uint64_t>& want = slots_[std::size_t(seq)].serials;
        const std::vector<std::uint64_t> plan = world_.engine.storage(seq, KVWELD_STORAGE_PLAN, n);
        if (plan != want)
            judge_.fail(Verdict::stale_decode, Oracle::weld,
                        cat("sequence ", seq, ": the held plan reads and writes storage ", serials_text(plan),
                            " but the sequence holds ", serials_text(want), " (the ledger)"));
    }
}

}  // namespace kvweld::sim
