// The data shadow and the data oracle: kvweld's reference forward keeps its
// own KV per sequence (a ReferenceKv) from the sequence's own token history
// and the calls made of it (a copy copies it, a shift moves it on the
// reference's own terms, a load puts back the one saved), and every row of
// logits the engine returns is judged against the reference's
// (logit_error <= kDataTolerance; a NaN is an infinite error). Trusts
// nothing the engine reports; the reference's rows are what the simulator
// chooses the next tokens from. Not judging (unchecked, or settings the
// reference cannot follow), it hands on the engine's own rows, or the
// twin's where there is one. With the live setting embeddings on (ABI 10),
// each output row's embeddings are read back from the engine and judged
// against the reference's hidden state after the final norm, likewise;
// under an engine setting that pools them (targets/engine_entry.hpp), a
// row's are its sequence's tokens of the call pooled: their hidden states'
// mean, or the last one's.
// A row of a sequence with a backend sampler chain (ABI 11) is judged by
// its sampled token instead of its logits.
#include "sim/observers.hpp"

#include "util/overloaded.hpp"

#include "engine/reference.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"
#include "util/cat.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim {

using namespace targets;

DataShadow::DataShadow(const World& world, Judge& judge, RunStats& stats, bool judging)
    : world_(world),
      judge_(judge),
      stats_(stats),
      judging_(judging),
      pooling_(embeddings_pooling(world.config.engine.engine, world.config.engine.params)) {}

void DataShadow::on_call(const MemoryCall& call) {
    // An open of a sequence whose shadow is held: a close the shadow was not
    // told of (its own state gone wrong), never a fresh start over it.
    const auto fresh = [&](int seq) {
        require(!shadows_.count(seq), "data shadow: sequence ", seq, " opened while its shadow is held");
        return std::make_unique<ReferenceKv>(world_.config.model);
    };
    std::visit(Overloaded{
                   [&](const calls::Open& c) { shadows_[c.seq] = fresh(c.seq); },
                   [&](const calls::OpenSized& c) { shadows_[c.seq] = fresh(c.seq); },
                   [&](const calls::Close& c) { shadows_.erase(c.seq); },
                   [&](const calls::Copy& c) { shadows_[c.dst] = std::make_unique<ReferenceKv>(*shadows_.at(c.src)); },
                   [&](const calls::Migrate& c) {
                       shadows_[c.to] = std::move(shadows_.at(c.from));
                       shadows_.erase(c.from);
                   },
                   [&](const calls::Shift& c) { shadows_.at(c.seq)->shift(world_.config.model, c.p0, c.p1, c.len); },
                   [&](const calls::SetLive& c) {
                       if (c.key == abi::kEmbeddingsKey) embeddings_ = c.value == "1";
                       if (c.key == abi::kCausalKey) causal_ = c.value == "1";
                   },
                   [&](const calls::Save& c) {
                       saved_.emplace_back(c.id, *shadows_.at(c.seq));
                       if (saved_.size() > std::size_t(kSavedStates)) saved_.pop_front();
                   },
                   [&](const calls::Load& c) {
                       const auto it = std::find_if(saved_.begin(), saved_.end(), [&](const auto& s) { return s.first == c.id; });
                       require(it != saved_.end(), "data shadow: no saved state ", c.id);
                       shadows_[c.seq] = std::make_unique<ReferenceKv>(it->second);
                   },
                   IgnoredCalls{},  // observers.hpp: why each
               },
               call);
}

// Where the reference cannot follow the engine (not judging), the next
// tokens come from the twin's rows when there is one, else the engine's.
void DataShadow::on_decode(Decoded& d) {
    const auto v = std::size_t(world_.config.model.vocab);
    const std::vector<float>& got = judging_ || d.twin_rows.empty() ? d.got : d.twin_rows;
    std::size_t row = 0;  // `got` holds the rows of the output pairs only
    d.want.clear();
    if (!judging_) {
        for (const Pair& p : d.batch.pairs) {
            d.want.emplace_back();
            if (!p.output) continue;
            d.want.back().assign(got.begin() + long(row * v), got.begin() + long((row + 1) * v));
            ++row;
            ++stats_.rows;
        }
        return;
    }
    const std::vector<Pair>& pairs = d.batch.pairs;
    const bool embeddings = embeddings_ && (world_.engine.capabilities() & KVWELD_CAP_EMBEDDINGS);
    std::vector<std::vector<float>> hidden;
    reference_rows(pairs, embeddings, d.want, hidden);
    if (embeddings) pool(pairs, hidden);
    std::map<int, int> last_pos;  // per sequence, its span's last position in the call
    for (const Pair& p : pairs) last_pos[p.seq] = std::max(last_pos[p.seq], p.pos);
    for (std::size_t i = 0; i < pairs.size(); ++i) {
        if (!pairs[i].output) continue;  // its row is not returned; its KV is in the shadow
        // A routing tie up to what the row attends to: the reference's row
        // is one right answer of two, so it is not judged (it still picks
        // the next tokens; the twin, where there is one, judges the row).
        if (shadow(pairs[i].seq).routing_tied(causal_ ? pairs[i].pos : last_pos[pairs[i].seq])) {
            ++row;
            ++stats_.rows;
            ++stats_.routing_tie_rows;
            continue;
        }
        if (embeddings) judge_embeddings(pairs[i], i, pairs.size(), row, hidden[i]);
        if (!d.sampled.empty()) judge_sampled(d, pairs[i], i, row);
        if (world_.samplers.count(pairs[i].seq)) {  // judged by its token: its logits may be left unfilled
            ++row;
            ++stats_.rows;
            continue;
        }
        const double err = logit_error(std::span<const float>(got).subspan(row++ * v, v), d.want[i]);
        ++stats_.rows;
        ++stats_.reference_rows;
        stats_.max_logit_error = std::max(stats_.max_logit_error, std::isfinite(err) ? err : 1e300);
        if (!(err <= kDataTolerance))
            judge_.fail_in_call(Verdict::stale_decode, Oracle::data,
                                cat("sequence ", pairs[i].seq, " position ", pairs[i].pos, " (row ", i, " of ",
                                    pairs.size(), " in the call): logit error ", err, " > ", kDataTolerance,
                                    " against the reference"));
    }
}

// Each sequence's pairs of the call are consecutive positions: one span,
// causal or not as the live setting is (with it on, the same numbers as
// one pair at a time).
void DataShadow::reference_rows(const std::vector<Pair>& pairs, bool hidden, std::vector<std::vector<float>>& rows,
                                std::vector<std::vector<float>>& hiddens) {
    std::map<int, std::vector<std::size_t>> spans;
    for (std::size_t i = 0; i < pairs.size(); ++i) spans[pairs[i].seq].push_back(i);
    rows.assign(pairs.size(), {});
    hiddens.assign(pairs.size(), {});
    for (const auto& [seq, at] : spans) {
        std::vector<int> tokens;
        for (std::size_t i : at) {
            require(pairs[i].pos == pairs[at[0]].pos + int(tokens.size()), "data shadow: sequence ", seq,
                    "'s pairs in the call are not at consecutive positions (", pairs[i].pos, " after ",
                    pairs[at[0]].pos, "+", tokens.size() - 1, ")");
            tokens.push_back(pairs[i].token);
        }
        if (!causal_ && at.size() > 1) {
            ++stats_.non_causal_spans;
            stats_.non_causal_tokens += at.size();
        }
        std::vector<std::vector<float>> h;
        std::vector<std::vector<float>> logits = reference_forward_span(
            world_.model, *shadows_.at(seq), tokens, pairs[at[0]].pos, world_.adapters, causal_, hidden ? &h : nullptr);
        for (std::size_t k = 0; k < at.size(); ++k) {
            rows[at[k]] = std::move(logits[k]);
            if (hidden) hiddens[at[k]] = std::move(h[k]);
        }
    }
}

// Under a pooling setting, each pair's expected embeddings become its
// sequence's pooled over the call: the mean of its pairs' hidden states,
// or its last pair's (every pair, output or not: llama.h pools them all).
void DataShadow::pool(const std::vector<Pair>& pairs, std::vector<std::vector<float>>& hidden) const {
    if (pooling_ == abi::Pooling::none) return;
    std::map<int, std::vector<std::size_t>> of_seq;
    for (std::size_t i = 0; i < pairs.size(); ++i) of_seq[pairs[i].seq].push_back(i);
    for (const auto& [seq, at] : of_seq) {
        std::vector<float> pooled = hidden[at.back()];
        if (pooling_ == abi::Pooling::mean) {
            std::fill(pooled.begin(), pooled.end(), 0.0f);
            for (std::size_t i : at)
                for (std::size_t k = 0; k < pooled.size(); ++k) pooled[k] += hidden[i][k];
            for (float& x : pooled) x /= float(at.size());
        }
        for (std::size_t i : at) hidden[i] = pooled;
    }
}

// The engine's embeddings of output row `row` (pair i of n) against the
// reference's hidden state, on the data oracle's metric and tolerance.
void DataShadow::judge_embeddings(const Pair& pair, std::size_t i, std::size_t n, std::size_t row,
                                  const std::vector<float>& want) {
    const std::vector<float> got = world_.engine.embeddings(int(row), world_.config.model.dim);
    const double err = logit_error(got, want);
    ++stats_.embedding_rows;
    stats_.max_embedding_error = std::max(stats_.max_embedding_error, std::isfinite(err) ? err : 1e300);
    if (!(err <= kDataTolerance))
        judge_.fail_in_call(Verdict::stale_decode, Oracle::data,
                            cat("sequence ", pair.seq, " position ", pair.pos, " (row ", i, " of ", n,
                                " in the call): embeddings error ", err, " > ", kDataTolerance,
                                " against the reference's hidden state",
                                pooling_ == abi::Pooling::none
                                    ? ""
                                    : cat(" (pooling=", abi::kPoolingNames[int(pooling_)],
                                          ": the sequence's tokens of the call pooled)")));
}

// A sequence with a chain: a token the chain may give for the reference's
// logits (sampling.hpp's may_sample: any draw, within the data tolerance);
// without one: none (-1), so a chain cleared but still applied shows.
void DataShadow::judge_sampled(const Decoded& d, const Pair& pair, std::size_t i, std::size_t row) {
    const int token = d.sampled[row];
    const auto chain = world_.samplers.find(pair.seq);
    const auto where = [&] {
        return cat("sequence ", pair.seq, " position ", pair.pos, " (row ", i, " of ", d.batch.pairs.size(),
                   " in the call): ");
    };
    if (chain == world_.samplers.end()) {
        if (token != -1)
            judge_.fail_in_call(Verdict::stale_decode, Oracle::data,
                                cat(where(), "sampled token ", token, " for a sequence with no sampler chain"));
        return;
    }
    ++stats_.sampled_rows;
    if (!may_sample(chain->second, d.want[i], token, kDataTolerance))
        judge_.fail_in_call(Verdict::stale_decode, Oracle::data,
                            cat(where(), "sampled token ", token, ", which its chain (", describe(chain->second),
                                ") cannot give for the reference's logits"));
}

}  // namespace kvweld::sim
