// The fresh-prefill oracle: for any architecture, the row a sequence gets
// must be the row a fresh context of the same model gives for exactly the
// tokens the simulator's log says the sequence holds. A third instance of
// the engine (the same settings with plan reuse off, no fault switch) keeps
// sequence 0 open; for each call it is cleared whole (clear_all), given the
// sequence's earlier tokens in one call and the call's own tokens of it in
// a second, and every output row of the engine's is judged against its
// (logit_error <= kDataTolerance, or the engine's declared twin tolerance
// where wider; with embeddings on, its embeddings instead: lfm2 computes
// no logits then). Nothing is reused there,
// so any stale state in the engine's memory shows: a rollback, a copy, a
// state load or a shift that kept what it should have dropped.
//
// It needs no reference forward (kvweld's knows llama only), and it sees
// what the twin cannot: the twin replays every memory call, so a memory
// call that goes wrong goes wrong in both. Its log is the simulator's:
// each call's effect on the tokens a sequence holds. A sequence whose
// earlier rows were made under other adapters (a LoRA set, a control
// vector, warmup on an MoE model) or by a non-causal span, or that was
// shifted, is left unjudged (counted) until it is emptied (a state saved
// before an adapter change is such a sequence when loaded): no single
// fresh prefill makes those rows (a K-shift rotates stored keys again,
// within rounding; a recurrent state keeps what a shift drops, by design).
#include "sim/observers.hpp"

#include "engine/reference.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"
#include "util/cat.hpp"
#include "util/overloaded.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim {

using namespace targets;

namespace {

constexpr int kFreshSeq = 0;  // the fresh engine's one sequence

}  // namespace

// On where the reference cannot follow the engine (the data oracle is off)
// and the registry does not say the fresh prefill is blind there.
std::unique_ptr<FreshPrefill> open_fresh(const World& world, Judge& judge, RunStats& stats, OracleReport& oracles) {
    if (oracles.data) {
        oracles.fresh_why_not = "the reference forward judges every row (the fresh prefill runs where it cannot)";
        return nullptr;
    }
    const EngineChoice& e = world.config.engine;
    if (std::string why = fresh_blind(e.engine, e.params); !why.empty()) {
        oracles.fresh_why_not = std::move(why);
        return nullptr;
    }
    auto fresh = open_no_reuse(world, "", oracles.fresh_why_not);
    if (!fresh) return nullptr;
    oracles.fresh = true;
    return std::make_unique<FreshPrefill>(world, judge, stats, std::move(fresh));
}

FreshPrefill::FreshPrefill(const World& world, Judge& judge, RunStats& stats, std::unique_ptr<Engine> fresh)
    : world_(world), judge_(judge), stats_(stats), fresh_(std::move(fresh)),
      lists_causal_(fresh_->live_settings().find(abi::kCausalKey) != std::string::npos) {
    require(fresh_->vocab() == world.config.model.vocab, "fresh-prefill engine ", fresh_->name(), " reports vocab ",
            fresh_->vocab(), " for a model of vocab ", world.config.model.vocab);
    fresh_->apply(calls::Open{kFreshSeq});
}

void FreshPrefill::on_call(const MemoryCall& call) {
    const auto emptied = [&](int seq) { held_.at(seq) = Held{}; };
    // An open of a sequence it holds: a close it was not told of (its own
    // account gone wrong), never a fresh start over it.
    const auto opened = [&](int seq) {
        require(!held_.count(seq), "fresh prefill: sequence ", seq, " opened while it holds it");
        held_[seq] = Held{};
    };
    // Rows made under other adapters stay in every sequence that holds any,
    // and in every saved state: one loaded after the change brings them back.
    const auto adapters_changed = [&] {
        const auto mark = [](Held& h) {
            if (!h.tokens.empty() && h.unjudged.empty()) h.unjudged = "holds rows made under other adapters";
        };
        for (auto& [seq, h] : held_) mark(h);
        for (auto& [id, h] : saved_) mark(h);
    };
    std::visit(Overloaded{
                   [&](const calls::Open& c) { opened(c.seq); },
                   [&](const calls::OpenSized& c) { opened(c.seq); },
                   [&](const calls::Close& c) { held_.erase(c.seq); },
                   [&](const calls::Truncate& c) {
                       Held& h = held_.at(c.seq);
                       h.tokens.resize(std::size_t(c.n));
                       if (h.tokens.empty()) h.unjudged.clear();
                   },
                   [&](const calls::Clear& c) { emptied(c.seq); },
                   [&](const calls::Copy& c) { held_[c.dst] = held_.at(c.src); },
                   [&](const calls::ClearAll&) {
                       for (auto& [seq, h] : held_) h = Held{};
                   },
                   [&](const calls::Keep& c) {
                       for (int seq : c.emptied) emptied(seq);
                   },
                   [&](const calls::Reload& c) {
                       fresh_->apply(c);  // its sequence stays open, emptied
                       for (auto& [seq, h] : held_) h = Held{};
                   },
                   [&](const calls::Migrate& c) {
                       held_[c.to] = std::move(held_.at(c.from));
                       held_.erase(c.from);
                   },
                   [&](const calls::SetLoras& c) {
                       fresh_->apply(c);
                       adapters_changed();
                   },
                   [&](const calls::SetCvec& c) {
                       fresh_->apply(c);
                       adapters_changed();
                   },
                   [&](const calls::SetWarmup& c) {
                       fresh_->apply(c);
                       if (world_.config.model.moe()) adapters_changed();  // no effect on a dense model
                   },
                   [&](const calls::Shift& c) {
                       Held& h = held_.at(c.seq);
                       h.tokens.erase(h.tokens.begin() + c.p0, h.tokens.begin() + c.p1);
                       // A K-shift rotates the stored keys again: the rows
                       // after it lie from a fresh prefill's by rounding
                       // (9.9e-4 in a logit, arch=granite_swa seed 6), past
                       // the tolerance; a recurrent state keeps what a shift
                       // drops (EngineEntry::partial_removal's keeps). The
                       // twin still judges those rows.
                       if (h.unjudged.empty()) h.unjudged = "shifted";
                   },
                   [&](const calls::Save& c) {
                       saved_.emplace_back(c.id, held_.at(c.seq));
                       if (saved_.size() > std::size_t(kSavedStates)) saved_.pop_front();
                   },
                   [&](const calls::Load& c) {
                       const auto it = std::find_if(saved_.begin(), saved_.end(), [&](const auto& s) { return s.first == c.id; });
                       require(it != saved_.end(), "fresh prefill: no saved state ", c.id);
                       held_[c.seq] = it->second;
                   },
                   [&](const calls::SetLive& c) {
                       live_[c.key] = c.value;
                       if (c.key != abi::kCausalKey) fresh_->apply(c);  // causal_attn: set per call (prefill)
                   },
                   IgnoredCalls{},  // observers.hpp: why each
               },
               call);
}

// Each sequence's output rows against a fresh prefill of what it held
// before the call, then its tokens of the call; then the call's tokens are
// what it holds.
void FreshPrefill::on_decode(Decoded& d) {
    const auto v = std::size_t(world_.config.model.vocab);
    std::map<int, std::vector<std::size_t>> spans;  // per sequence, its pairs of the call
    std::map<std::size_t, std::size_t> row_of;      // pair -> its row in d.got
    for (std::size_t i = 0, row = 0; i < d.batch.pairs.size(); ++i) {
        spans[d.batch.pairs[i].seq].push_back(i);
        if (d.batch.pairs[i].output) row_of[i] = row++;
    }
    const bool causal = !live_.count(abi::kCausalKey) || live_.at(abi::kCausalKey) == "1";
    const bool embeddings = live_.count(abi::kEmbeddingsKey) && live_.at(abi::kEmbeddingsKey) == "1" &&
                            (world_.engine.capabilities() & KVWELD_CAP_EMBEDDINGS);
    for (const auto& [seq, at] : spans) {
        Held& h = held_.at(seq);
        const auto outputs = std::count_if(at.begin(), at.end(), [&](std::size_t i) { return d.batch.pairs[i].output; });
        if (outputs > 0 && !h.unjudged.empty()) stats_.fresh_unjudged += std::uint64_t(outputs);
        else if (outputs > 0 && world_.samplers.count(seq)) stats_.fresh_unjudged += std::uint64_t(outputs);  // the twin judges its tokens
        else if (outputs > 0) judge_span(d, seq, at, row_of, causal, embeddings, v);
        for (std::size_t i : at) h.tokens.push_back(d.batch.pairs[i].token);
        if (!causal && at.size() > 1) h.unjudged = "holds a non-causal span's rows";
    }
}

// The fresh engine's rows for the span, after what the sequence held.
std::vector<float> FreshPrefill::prefill(const std::vector<int>& before, const std::vector<int>& span,
                                         const std::vector<std::uint8_t>& outputs, bool causal) {
    fresh_->apply(calls::ClearAll{});
    // Asked only when it changes (each a call to the fresh engine's process).
    const auto set_causal = [&](bool on) {
        if (!lists_causal_ || on == fresh_causal_) return;
        fresh_->apply(calls::SetLive{abi::kCausalKey, on ? "1" : "0"});
        fresh_causal_ = on;
    };
    if (!before.empty()) {
        set_causal(true);
        const std::vector<std::int32_t> seqs(before.size(), kFreshSeq);
        std::vector<std::uint8_t> last(before.size(), 0);
        last.back() = 1;
        fresh_->decode(seqs, std::vector<std::int32_t>(before.begin(), before.end()),
                       fresh_->capabilities() & KVWELD_CAP_OUTPUTS ? std::span<const std::uint8_t>(last)
                                                                    : std::span<const std::uint8_t>());
    }
    set_causal(causal);
    const std::vector<std::int32_t> seqs(span.size(), kFreshSeq);
    const bool all = std::all_of(outputs.begin(), outputs.end(), [](std::uint8_t o) { return o != 0; });
    return fresh_->decode(seqs, std::vector<std::int32_t>(span.begin(), span.end()),
                          all ? std::span<const std::uint8_t>() : std::span<const std::uint8_t>(outputs));
}

void FreshPrefill::judge_span(const Decoded& d, int seq, const std::vector<std::size_t>& at,
                              const std::map<std::size_t, std::size_t>& row_of, bool causal, bool embeddings,
                              std::size_t v) {
    std::vector<int> span;
    std::vector<std::uint8_t> outputs;
    for (std::size_t i : at) {
        span.push_back(d.batch.pairs[i].token);
        outputs.push_back(d.batch.pairs[i].output ? 1 : 0);
    }
    const std::vector<float> rows = prefill(held_.at(seq).tokens, span, outputs, causal);
    const double tolerance = std::max(kDataTolerance, world_.engine.twin_tolerance().tolerance);
    std::size_t fresh_row = 0;
    for (std::size_t i : at) {
        const Pair& pair = d.batch.pairs[i];
        if (!pair.output) continue;
        const std::size_t row = row_of.at(i), mine = fresh_row++;
        const auto want = std::span<const float>(rows).subspan(mine * v, v);
        const auto where = [&] {
            return cat("sequence ", pair.seq, " position ", pair.pos, " (row ", row, " in the call, ",
                       held_.at(seq).tokens.size(), " tokens before it in the simulator's log)");
        };
        ++stats_.fresh_rows;
        // With embeddings on, a row's logits are not promised: lfm2's graph
        // computes none then (src/models/lfm2.cpp:287) and llama.cpp hands
        // back rows no call wrote. Its embeddings are judged instead.
        const double err = embeddings ? 0.0 : logit_error(std::span<const float>(d.got).subspan(row * v, v), want);
        stats_.max_fresh_error = std::max(stats_.max_fresh_error, std::isfinite(err) ? err : 1e300);
        if (!(err <= tolerance))
            judge_.fail_in_call(Verdict::stale_decode, Oracle::fresh,
                                cat(where(), ": logit error ", err, " > ", tolerance,
                                    " against a fresh context's prefill of the tokens the sequence holds"));
        if (!embeddings) continue;
        const int dim = world_.config.model.dim;
        const double e = logit_error(world_.engine.embeddings(int(row), dim), fresh_->embeddings(int(mine), dim));
        if (!(e <= tolerance))
            judge_.fail_in_call(Verdict::stale_decode, Oracle::fresh,
                                cat(where(), ": embeddings error ", e, " > ", tolerance,
                                    " against a fresh context's prefill of the tokens the sequence holds"));
    }
}

}  // namespace kvweld::sim
