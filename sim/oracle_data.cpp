// The data oracle of the simulator: every row of logits the engine
// returns against kvweld's reference forward over that sequence's own
// history (logit_error <= kDataTolerance; a NaN is an infinite error).
// Trusts nothing the engine reports; the reference's rows are what the
// simulator chooses the next tokens from. Unchecked (--no-oracles), the
// engine's own rows are returned instead.
#include "util/cat.hpp"
#include "engine/reference.hpp"
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim {

std::vector<std::vector<float>> Simulator::check_data(const std::vector<Pair>& pairs, const std::vector<float>& got) {
    const auto v = std::size_t(config_.model.vocab);
    std::vector<std::vector<float>> want;
    std::size_t row = 0;  // `got` holds the rows of the output pairs only
    if (!oracles_.data) {  // unchecked, or settings the reference cannot follow: `got` chooses what comes next
        for (const Pair& p : pairs) {
            want.emplace_back();
            if (!p.output) continue;
            want.back().assign(got.begin() + long(row * v), got.begin() + long((row + 1) * v));
            ++row;
            ++stats_.rows;
        }
        return want;
    }
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        Request& r = *requests_[std::size_t(pairs[i].seq)];
        want.push_back(reference_forward(model_, r.shadow, pairs[i].token, pairs[i].pos, adapters_));
        if (!pairs[i].output) continue;  // its row is not returned; its KV is in the shadow
        const double err = logit_error(std::span<const float>(got).subspan(row++ * v, v), want.back());
        ++stats_.rows;
        ++stats_.reference_rows;
        stats_.max_logit_error = std::max(stats_.max_logit_error, std::isfinite(err) ? err : 1e300);
        if (!(err <= kDataTolerance))
            fail(Verdict::stale_decode, Oracle::data,
                 cat("sequence ", pairs[i].seq, " position ", pairs[i].pos, " (row ", i, " of ", pairs.size(),
                     " in the call): logit error ", err, " > ", kDataTolerance, " against the reference"),
                 call_clause());
    }
    return want;
}

}  // namespace kvweld::sim
