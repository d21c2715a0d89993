// The kv oracle of the serving simulator, for engines that read back their
// KV rows (KVWELD_CAP_READ_KV): trusts the rows read and nothing the
// engine says about them; the expectation is the reference's.
#include "engine/cat.hpp"
#include "sim/serve/serve_sim.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace kvweld::sim {

// Each decoded position read back from the engine, against the reference's
// K and V over the sequence's own history.
void ServeSimulator::check_kv(const std::vector<Pair>& pairs) {
    if (!oracles_.kv) return;
    const int n = config_.model.n_layers, kv_dim = config_.model.kv_dim();
    std::vector<float> k(static_cast<std::size_t>(kv_dim)), v(static_cast<std::size_t>(kv_dim));
    for (const Pair& p : pairs) {
        const ServeRequest& r = *requests_[std::size_t(p.seq)];
        for (int l = 0; oracles_.kv && l < n; ++l) {
            engine_->read_kv(p.seq, l, p.pos, k, v);
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
