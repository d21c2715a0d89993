// The kv oracle of the simulator, for engines that read back their
// KV rows (KVWELD_CAP_READ_KV): trusts the rows read and nothing the
// engine says about them; the expectation is the reference's. White box,
// it reads the storage the ledger pinned instead, never what the engine
// reports afterwards: a stale plan that writes and reads its own old buffer
// is self-consistent and may produce the right logits, but the storage the
// sequence really holds then misses the row.
#include "util/cat.hpp"
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace kvweld::sim {

void Simulator::read_row(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const {
    if (!white_box_) return engine_->read_kv(seq, layer, pos, k, v);
    KvStorage& s = *ledger_[std::size_t(seq)].pinned[std::size_t(layer)];
    if (s.device()) s.device()->download(s, pos, 1);  // compare what the device holds
    std::copy_n(s.key_row(pos), k.size(), k.begin());
    std::copy_n(s.value_row(pos), v.size(), v.begin());
}

// Each decoded position read back from the engine, against the reference's
// K and V over the sequence's own history.
void Simulator::check_kv(const std::vector<Pair>& pairs) {
    if (!oracles_.kv) return;
    const int n = config_.model.n_layers, kv_dim = config_.model.kv_dim();
    std::vector<float> k(static_cast<std::size_t>(kv_dim)), v(static_cast<std::size_t>(kv_dim));
    for (const Pair& p : pairs) {
        const Request& r = *requests_[std::size_t(p.seq)];
        for (int l = 0; oracles_.kv && l < n; ++l) {
            read_row(p.seq, l, p.pos, k, v);
            const auto row = [&](const std::vector<float>& m) {
                return std::span<const float>(m).subspan(std::size_t(p.pos) * std::size_t(kv_dim), std::size_t(kv_dim));
            };
            const double err = std::max(logit_error(k, row(r.shadow.key[std::size_t(l)])),
                                        logit_error(v, row(r.shadow.value[std::size_t(l)])));
            stats_.max_kv_error = std::max(stats_.max_kv_error, std::isfinite(err) ? err : 1e300);
            if (!(err <= kDataTolerance))
                fail(Verdict::stale_decode, Oracle::kv,
                     cat("sequence ", p.seq, " position ", p.pos, " layer ", l, ": the K/V the sequence holds has error ",
                         err, " > ", kDataTolerance, " against the reference: the decode wrote somewhere else"));
        }
    }
}

// The block ledger: every open sequence's table and every block's count
// must be what the simulator's block model says from the op log alone.

}  // namespace kvweld::sim
