// The kv oracle, for engines that read back their KV rows
// (KVWELD_CAP_READ_KV): trusts the rows read and nothing the engine says
// about them; the expectation is the data shadow's. White box, it reads
// the storage the ledger pinned instead, never what the engine reports
// afterwards: a stale plan that writes and reads its own old buffer is
// self-consistent and may produce the right logits, but the storage the
// sequence really holds then misses the row.
#include "sim/observers.hpp"

#include "util/cat.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim {

KvOracle::KvOracle(const World& world, Judge& judge, RunStats& stats, const DataShadow& shadow,
                   const StorageLedger* ledger)
    : world_(world), judge_(judge), stats_(stats), shadow_(shadow), ledger_(ledger) {}

void KvOracle::read_row(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const {
    if (!ledger_) return world_.engine.read_kv(seq, layer, pos, k, v);
    KvStorage& s = *ledger_->pinned(seq)[std::size_t(layer)];
    if (s.device()) s.device()->download(s, pos, 1);  // compare what the device holds
    std::copy_n(s.key_row(pos), k.size(), k.begin());
    std::copy_n(s.value_row(pos), v.size(), v.begin());
}

// Each decoded position, every layer, against the reference's K and V over
// the sequence's own history.
void KvOracle::on_decode(Decoded& d) {
    const int n = world_.config.model.n_layers, kv_dim = world_.config.model.kv_dim();
    std::vector<float> k(static_cast<std::size_t>(kv_dim)), v(static_cast<std::size_t>(kv_dim));
    for (const Pair& p : d.batch.pairs) {
        const ReferenceKv& want = shadow_.shadow(p.seq);
        if (want.routing_tied(p.pos)) continue;  // the later layers' K/V may rightly differ (kRoutingTieMargin)
        for (int l = 0; l < n; ++l) {
            read_row(p.seq, l, p.pos, k, v);
            const auto row = [&](const std::vector<float>& m) {
                return std::span<const float>(m).subspan(std::size_t(p.pos) * std::size_t(kv_dim), std::size_t(kv_dim));
            };
            const double err = std::max(logit_error(k, row(want.key[std::size_t(l)])),
                                        logit_error(v, row(want.value[std::size_t(l)])));
            stats_.max_kv_error = std::max(stats_.max_kv_error, std::isfinite(err) ? err : 1e300);
            if (!(err <= kDataTolerance))
                judge_.fail(Verdict::stale_decode, Oracle::kv,
                            cat("sequence ", p.seq, " position ", p.pos, " layer ", l, ": the K/V the sequence holds has error ",
                                err, " > ", kDataTolerance, " against the reference: the decode wrote somewhere else"));
        }
    }
}

}  // namespace kvweld::sim
