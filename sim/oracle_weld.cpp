// The ledger and the weld oracle of the simulator, for engines that
// report storage identity (KVWELD_CAP_STORAGE). They trust the engine's
// storage reports only as checked here, and the rule's word on which ops
// may replace storage.
//
// The ledger is the simulator's own record of the storage each sequence
// holds. It takes the engine's report only right after an op, and only as
// the engine's rule says the op may change it (ReuseRule::storage_effect):
// a replacement must show serials the run has never seen, distinct across
// layers, in exactly the layers replaced; an op that keeps storage must
// show the same serials. Serials are never recycled (the ABI's promise),
// so storage kept behind a "replacement" is caught. The weld oracle then
// compares the storage the held plan reads and writes with the ledger's.
#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace kvweld::sim {

namespace {

std::string serials_text(const std::vector<std::uint64_t>& s) {
    std::string out;
    for (std::uint64_t v : s) out += cat(out.empty() ? "" : " ", v);
    return out;
}

}  // namespace

void Simulator::ledger_after(SeqOp op, int seq, std::optional<int> layer) {
    if (!oracles_.weld) return;
    SlotLedger& entry = ledger_[std::size_t(seq)];
    const int n = config_.model.n_layers;
    const std::vector<std::uint64_t> now = engine_->storage(seq, KVWELD_STORAGE_HELD, n);
    const bool fresh = entry.serials.empty();  // nothing recorded yet: a slot's first storage
    const StorageEffect effect = fresh ? StorageEffect::replaces
                                 : rule_ ? rule_->storage_effect(op)
                                         : default_storage_effect(op);
    const OpKind kind = op_kind_;
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
            fail(Verdict::engine_error, Oracle::ledger,
                 cat("sequence ", seq, " layer ", l, " after ", to_string(kind), ": its storage ", problem,
                     " (storage serials now: ", serials_text(now), ")"));
        accepted[std::size_t(l)] = s;
    }
    seen_serials_.insert(mine.begin(), mine.end());
    entry.serials = accepted;
    if (white_box_) pin(seq, now);
}

// White box: the ledger holds the storage objects the serials it accepted
// name; what the engine reports later is never taken instead.
void Simulator::pin(int seq, const std::vector<std::uint64_t>& serials) {
    SlotLedger& entry = ledger_[std::size_t(seq)];
    const std::vector<KvLayer> held = white_box_->held_layers(seq);
    entry.pinned.resize(held.size());
    for (std::size_t l = 0; l < held.size(); ++l)
        if (!entry.pinned[l] || entry.pinned[l]->serial().get() != serials[l]) {
            require(held[l]->serial().get() == serials[l], "white box: layer ", l, " holds storage ",
                    held[l]->serial().get(), " where the engine reported serial ", serials[l]);
            entry.pinned[l] = held[l];
        }
}

// Weld first: when a plan is on the wrong storage it names the storage,
// where the kv oracle would only see the row missing.
void Simulator::check_weld(const std::vector<Pair>& pairs) {
    const int n = config_.model.n_layers;
    std::set<int> decoded;
    for (const Pair& p : pairs) decoded.insert(p.seq);
    for (int seq : decoded) {
        if (!oracles_.weld) break;
        ledger_after(SeqOp::decode, seq);  // a decode keeps the storage
        const std::vector<std::uint64_t>& want = ledger_[std::size_t(seq)].serials;
        const std::vector<std::uint64_t> plan = engine_->storage(seq, KVWELD_STORAGE_PLAN, n);
        if (plan != want)
            fail(Verdict::stale_decode, Oracle::weld,
                 cat("sequence ", seq, ": the held plan reads and writes storage ", serials_text(plan),
                     " but the sequence holds ", serials_text(want), " (the ledger)"));
    }
}

}  // namespace kvweld::sim
