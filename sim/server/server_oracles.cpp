// The server simulator's oracles (sim/server/server_oracles.hpp).
#include "sim/server/server_oracles.hpp"

#include "sim/server/sampler_cut.hpp"
#include "sim/server/server_wire.hpp"
#include "targets/llamaserver/http.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim::server {

namespace {

// Each chunk of `plan` moved as the server moves it (positions [to, from)
// dropped, the rest moved down) on a mirror of `len` positions.
void shift_chunks(const ModelConfig& config, ReferenceKv& kv, const ReusePlan& plan, int len) {
    int removed = 0;
    for (const ReusePlan::Chunk& c : plan.chunks) {
        const int p1 = c.from - removed;
        kv.shift(config, c.to, p1, len);
        len -= p1 - c.to, removed += p1 - c.to;
    }
}

}  // namespace

// ---- LogprobOracle

LogprobOracle::LogprobOracle(const ServerSettings& s, const Model& model, std::vector<std::shared_ptr<const LoraAdapter>> loras)
    : model_(model), tolerance_(s.tolerance()), cache_reuse_(s.cache_reuse), shift_ctx_(s.shift_ctx(model.config().max_seq_len)),
      states_(s, model.config().max_seq_len, Mirror{{}, ReferenceKv(model.config(), s.kv_type)}), loras_(std::move(loras)) {
    require(int(loras_.size()) == s.loras, "LogprobOracle: ", loras_.size(), " adapters for settings with ", s.loras);
}

std::string LogprobOracle::on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) {
    return states_.complete(c, answers, [&](Mirror& m, const Mirror&, const ServerAnswer& a) { return judge(m, c, a); });
}

std::string LogprobOracle::judge(Mirror& m, const Completion& c, const ServerAnswer& a) {
    // KV computed with other LoRA scales is not this request's: the server must compute it again.
    const std::vector<float>& scales = states_.scales(c);
    if (m.scales != scales) m.clear(), m.scales = scales;
    const Adapters adapters = adapters_at(model_.config(), loras_, scales);
    const ReusePlan plan = plan_reuse(m.tokens, c.prompt, cache_reuse_);
    shift_chunks(model_.config(), m.kv, plan, int(m.tokens.size()));
    std::vector<int> held = c.prompt;
    held.insert(held.end(), a.tokens.begin(), a.tokens.end());
    std::string wrong;
    // Each token decoded at its KV position: its index less what context shifts dropped before it.
    const std::vector<ContextShift> shifts = context_shifts(c, a, shift_ctx_);
    std::size_t next = 0;
    int dropped = 0;
    for (int pos = plan.n_past; pos + 1 < int(held.size()); ++pos) {
        if (next < shifts.size() && shifts[next].before == pos - int(c.prompt.size())) {
            const ContextShift& s = shifts[next++];
            m.kv.shift(model_.config(), s.keep, s.keep + s.discard, s.len);
            dropped += s.discard, ++shifts_;
        }
        const std::vector<double> lp = log_probs(reference_forward(model_, m.kv, held[std::size_t(pos)], pos - dropped, adapters));
        const int i = pos - int(c.prompt.size()) + 1;  // the generated token this position predicts
        if (i < 0 || !wrong.empty()) continue;
        const int token = a.tokens[std::size_t(i)];
        const double best = *std::max_element(lp.begin(), lp.end());
        ++judged_;
        // check logprobs.greedy-token: a greedy token the reference does not rank first
        if (c.temperature == 0 && lp[std::size_t(token)] < best - tolerance_)
            wrong = cat("generated token ", i, " is ", token, " (reference logprob ", lp[std::size_t(token)],
                        "), but the reference's most likely has ", best);
        std::vector<std::pair<int, double>> seen = a.top[std::size_t(i)];
        seen.emplace_back(token, a.chosen[std::size_t(i)]);
        for (const auto& [id, logprob] : seen) {
            const double d = std::fabs(logprob - lp[std::size_t(id)]);
            worst_ = std::max(worst_, d);
            // check logprobs.logprob: a logprob (the chosen token's or a top one's) off the reference's
            if (!(d <= tolerance_) && wrong.empty())
                wrong = cat("generated token ", i, ": token ", id, " logprob ", logprob, ", reference ", lp[std::size_t(id)],
                            " (|difference| ", d, " > ", tolerance_, ")");
        }
    }
    m.tokens = held_after(c, a, shift_ctx_);
    // A cut stream's slot may hold the last token the client saw: decoded, so its KV is there.
    if (m.tokens.size() + std::size_t(dropped) == held.size())
        reference_forward(model_, m.kv, held.back(), int(held.size()) - 1 - dropped, adapters);
    return wrong;
}

std::string LogprobOracle::on_slot(const Slot& op, int) { return states_.act(op), ""; }

std::string LogprobOracle::on_embedding(const Embed&, const std::vector<std::vector<float>>&) { return ""; }  // no tokens generated
std::string LogprobOracle::on_lora(const Lora& op) { return states_.lora(op), ""; }

void LogprobOracle::tally(ServerTally& t) const {
    t.tokens_judged += judged_, t.worst_logprob = std::max(t.worst_logprob, worst_);
    t.context_shifts += shifts_;
}

// ---- SlotCacheModel

// The memory llama.cpp gives the settings' arch, as the server meets it.
// A sliding window the server keeps whole (--swa-full) is no window to it
// (n_swa 0, server-context.cpp:1337).
SlotCacheModel::Memory SlotCacheModel::memory_of(const ServerSettings& s) {
    const llamacpp::ArchModel& a = arch_named(s.arch);
    if (a.memory == llamacpp::MemoryKind::kv) return Memory::kv;
    if (llamacpp::has_recurrent_state(a.memory)) return Memory::state;
    return Memory::window;
}

SlotCacheModel::SlotCacheModel(const ServerSettings& s, int model_ctx)
    : cache_reuse_(s.cache_reuse), shift_ctx_(s.shift_ctx(model_ctx)), memory_(memory_of(s)),
      n_swa_(arch_named(s.arch).window && !s.swa_full ? s.window : 0),
      ctx_checkpoints_(s.ctx_checkpoints), checkpoint_min_step_(s.checkpoint_min_step), states_(s, model_ctx, Held{}) {}

SlotCacheModel::Held SlotCacheModel::after(const Held& before, const Completion& c, const ServerAnswer& a) const {
    // A cut stream: the server may have decoded up to n_predict - 1 tokens before it heard.
    const std::vector<int> held = held_after(c, a, shift_ctx_);
    const bool counted = int(held.size()) == a.held;  // the server's count named only tokens the client saw
    // A cut stream's answer carries no count; where the model allows only
    // 0 (the prompt shares nothing the slot may reuse), 0 is its count.
    const bool none = a.cut && bounds(before, c).hi == 0;
    Held out{held, a.cut && !counted ? c.n_predict - int(a.tokens.size()) : 0, states_.scales(c), before.checkpoints,
             before.known && (!a.cut || none)};
    // The answer that computed the prompt made the checkpoints; a copy starts from its cells.
    if (memory_ != Memory::kv && a.index == 0) make_checkpoints(out.checkpoints, none ? 0 : a.cache_n, c.prompt);
    return out;
}

// The checkpoints a slot keeps once the server has processed a prompt from
// n_past: those past n_past are erased (server-context.cpp:3619-3625);
// then one is made before each batch of the prompt that starts with
// something in memory (3829-3905, with --ctx-checkpoints above 0): at
// n_past, and 4 tokens before the prompt's end, the last 4 being a batch
// of their own ("create checkpoints that many tokens before the end").
void SlotCacheModel::make_checkpoints(std::vector<Checkpoint>& checkpoints, int n_past, const std::vector<int>& prompt) const {
    std::erase_if(checkpoints, [&](const Checkpoint& k) { return k.n_tokens - 1 > n_past; });
    if (ctx_checkpoints_ == 0) return;
    const auto at = [&](int n) { return Checkpoint{n, requests_, {prompt.begin(), prompt.begin() + n}}; };
    const int size = int(prompt.size());
    if (n_past > 0) add_checkpoint(checkpoints, at(std::min(n_past, size)));
    if (size - n_past > 4) add_checkpoint(checkpoints, at(size - 4));
}

// create_checkpoint: with the list full, an earlier request's checkpoint
// within the minimum step of the one before it goes first, then the
// oldest; one at the same n_tokens is replaced.
void SlotCacheModel::add_checkpoint(std::vector<Checkpoint>& checkpoints, Checkpoint k) const {
    const auto full = [&](std::size_t more) { return checkpoints.size() + more >= std::size_t(ctx_checkpoints_); };
    int last = -1;
    for (auto it = checkpoints.begin(); full(1) && it != checkpoints.end();) {
        if (it->task != k.task && last >= 0 && it->n_tokens <= last + checkpoint_min_step_) {
            it = checkpoints.erase(it);
            continue;
        }
        last = it->n_tokens;
        ++it;
    }
    while (!checkpoints.empty() && full(0)) checkpoints.erase(checkpoints.begin());
    std::erase_if(checkpoints, [&](const Checkpoint& c) { return c.n_tokens == k.n_tokens; });
    checkpoints.push_back(k);
}

SlotCacheModel::Bounds SlotCacheModel::bounds(const Held& before, const Completion& c) const {
    // KV computed with other LoRA scales holds nothing this request may reuse.
    if (!before.tokens.empty() && before.scales != states_.scales(c)) return {0, 0, false, false};
    const int kv = plan_reuse(before.tokens, c.prompt, cache_reuse_).n_past;
    // Past the known tokens, the ones a cut stream may have left: the prompt may match them too.
    const bool to_the_end = before.maybe_more > 0 && kv == int(before.tokens.size());
    const int hi = to_the_end ? std::min(kv + before.maybe_more, int(c.prompt.size()) - 1) : kv;
    if (memory_ == Memory::kv) return {kv, hi, false, false};
    // Unmodelled (no lower bound): chunks or a context shift moved the
    // positions, or a cut stream left tokens or checkpoints the model does not know.
    if (cache_reuse_ || shift_ctx_ || before.maybe_more) return {0, hi, false, hi > 0, {}, memory_bounds(before, c).foreign};
    if (!before.known) return {0, hi, false, hi > 0};  // checkpoints made from a count a cut stream did not give
    return memory_bounds(before, c);
}

// Another memory than a KV cache: the server keeps the slot's memory where
// its smallest position is below a threshold (server-context.cpp:3520-3615:
// pos_min < pos_next - n_swa, one less for a prompt it holds whole), else
// restores the newest checkpoint that passes the same test (or starts at
// position 0) and ends within the common prefix, or processes the prompt
// from the start. A recurrent state's smallest position is its last
// (seq_pos_min; a hybrid's is the larger of its two), so it keeps its
// memory only for a prompt that extends all of it, and restores a
// checkpoint to its count: the count is known. A sliding-window cache's
// is one kvweld does not model: any count the memory may give is allowed
// (a checkpoint ends a position before its count: n - 1 too). Either way
// a checkpoint holds the state of the tokens it was made after, and only
// one of this prompt's may be restored: a count only another prompt's
// checkpoint gives is a stale read.
SlotCacheModel::Bounds SlotCacheModel::memory_bounds(const Held& before, const Completion& c) const {
    const int held = int(before.tokens.size()), prompt = int(c.prompt.size());
    const int lcp = common_prefix(before.tokens, c.prompt);
    if (lcp == 0) return {0, 0, false, false};
    const auto last_evaluated = [&](int n) { return n == prompt ? n - 1 : n; };  // [TAG_PROMPT_LOGITS]
    const bool state = memory_ == Memory::state;
    const int thold = std::max(0, lcp - n_swa_ - (lcp < prompt ? 0 : 1));
    if (state && held - 1 < thold) return {lcp, lcp, false, false, {lcp}};
    // Nothing kept, or (a window's) the common prefix kept.
    Bounds b{0, 0, false, !state, state ? std::vector<int>{0} : std::vector<int>{0, last_evaluated(lcp)}};
    for (auto k = before.checkpoints.rbegin(); k != before.checkpoints.rend(); ++k) {
        if (k->n_tokens - 1 > lcp) continue;
        const int n = last_evaluated(std::min(lcp, k->n_tokens));
        const bool passes = k->n_tokens - 1 < thold || k->n_tokens == 1;  // a state's pos_min is n_tokens - 1
        const bool ours = k->tokens.size() <= c.prompt.size() && std::equal(k->tokens.begin(), k->tokens.end(), c.prompt.begin());
        if (!ours) {
            if (!state || passes) b.foreign.push_back(n);
        } else if (!state) {
            b.may.insert(b.may.end(), {n, n - 1});
        } else if (passes) {
            b.may.push_back(n);
            if (!b.checkpoint) b.lo = n, b.checkpoint = true;  // the newest
        }
    }
    b.hi = state ? *std::max_element(b.may.begin(), b.may.end()) : lcp;
    return b;
}

std::pair<int, int> SlotCacheModel::allowed(const Completion& c, int slot) const {
    // On a copy of the slots: what `slot` would hold once the server took it (the RAM cache's part).
    SlotStates<Held> states = states_;
    ServerAnswer there;
    there.slot = slot;
    std::pair<int, int> out;
    states.complete(c, {there}, [&](Held&, const Held& before, const ServerAnswer&) {
        const Bounds b = bounds(before, c);
        return out = {b.lo, b.hi}, "";
    });
    return out;
}

std::string SlotCacheModel::judge(const Held& before, const Completion& c, const ServerAnswer& a) {
    const Bounds b = bounds(before, c);
    const auto& [lo, hi, checkpoint, unbounded, may, foreign] = b;
    reused_ += a.cache_n, allowed_ += std::clamp(a.cache_n, lo, hi);
    restored_ += checkpoint, unbounded_ += unbounded;
    if (std::string why = judge_foreign(b, a); !why.empty()) return why;
    // check reuse.stale-read: cache_n above what the slot holds of the prompt
    if (a.cache_n > hi)
        return ++stale_, cat("cache_n ", a.cache_n, " but slot ", a.slot, " holds only ", hi, " of the prompt (a stale read)");
    // check reuse.lost-reuse: cache_n below it
    if (a.cache_n < lo)
        return ++lost_, cat("cache_n ", a.cache_n, " but slot ", a.slot, " holds ", lo, " of the prompt",
                            checkpoint ? " in a context checkpoint" : "", " (lost reuse)");
    return "";
}

// A pinned request goes to its slot. An unpinned one goes to the slot
// holding the most of its prompt, where one holds over a tenth of it
// (get_available_slot); not judged while a slot holds tokens of a cut
// stream the model does not know.
std::string SlotCacheModel::slot_choice(const Completion& c, const std::vector<ServerAnswer>& answers) const {
    for (const ServerAnswer& a : answers)
        // check reuse.pinned-slot: a pinned request served by another slot
        if (c.slot >= 0 && a.index == 0 && a.slot != c.slot)
            return cat("served by slot ", a.slot, ", not slot ", c.slot, " the request named");
    if (c.slot >= 0) return "";
    std::vector<const std::vector<int>*> held;
    for (const Held& h : states_.slots()) {
        if (h.maybe_more > 0) return "";
        held.push_back(&h.tokens);
    }
    const int want = choose_slot(held, c).by_similarity;
    for (const ServerAnswer& a : answers)
        // check reuse.similar-slot: an unpinned request not on the slot holding the most of its prompt
        if (a.index == 0 && want >= 0 && a.slot != want)
            return cat("served by slot ", a.slot, ", but slot ", want, " holds the most of the prompt (", common_prefix(states_.slot(want).tokens, c.prompt),
                       " of ", c.prompt.size(), " tokens): the server takes the most similar slot");
    return "";
}

// What a cut stream's slot holds once idle: what the client saw but the
// last token, up to the n_predict - 1 the server may have decoded.
std::string SlotCacheModel::judge_cut(const Held& before, const Completion& c, const ServerAnswer& a) {
    if (a.held < 0) return "";  // a trace from before the count was read
    const int lo = int(c.prompt.size() + a.tokens.size()) - 1, hi = int(c.prompt.size()) + c.n_predict - 1;
    // check reuse.cut-stream-held: a cut stream's slot holding other than it may
    if (a.held < lo || a.held > hi)
        return ++stale_, cat("slot ", a.slot, " holds ", a.held, " tokens after the stream was cut at ", a.tokens.size(), " of ",
                             c.n_predict, ": the prompt's ", c.prompt.size(), " and what it generated allow ", lo, " to ", hi);
    // Where its answer carries a count (cache_n above 0), only that count is judged.
    return a.cache_n > 0 ? judge_foreign(bounds(before, c), a) : "";
}

// A count only a checkpoint of another prompt gives (and, for the known
// findings' walk, one a sliding window's own memory may give too).
std::string SlotCacheModel::judge_foreign(const Bounds& b, const ServerAnswer& a) {
    const bool may_give = std::find(b.may.begin(), b.may.end(), a.cache_n) != b.may.end();
    const bool foreign_gives = std::find(b.foreign.begin(), b.foreign.end(), a.cache_n) != b.foreign.end();
    foreign_ += foreign_gives && !may_give;  // unmodelled too (no `may`): the known findings' walk counts it
    window_or_foreign_ += foreign_gives && may_give && memory_ == Memory::window;
    // check reuse.foreign-checkpoint: a count only a checkpoint of another prompt gives
    if (!b.may.empty() && !may_give && foreign_gives)
        return ++stale_, cat("cache_n ", a.cache_n, " but the checkpoints of slot ", a.slot, " that end there hold another "
                             "prompt's tokens: the server restored a state that does not belong (a stale read)");
    return "";
}

std::string SlotCacheModel::on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) {
    std::string wrong = slot_choice(c, answers);
    const std::string why = states_.complete(c, answers, [&](Held& held, const Held& before, const ServerAnswer& a) {
        // A copy (n_cmpl) reports the parent's prompt statistics; a cut
        // stream never got its final event, which carries them.
        const std::string why = a.cut ? judge_cut(before, c, a) : judge(before, c, a);
        held = after(before, c, a);
        drafted_ += a.drafted, accepted_ += a.accepted;
        return why;
    });
    ++requests_;
    return wrong.empty() ? why : wrong;
}

std::string SlotCacheModel::on_slot(const Slot& op, int n) {
    const Held* saved = states_.file(op.file);
    const Held& moved = op.action == SlotAction::restore ? (saved ? *saved : Held{}) : states_.slot(op.slot);
    ++actions_;
    // A slot whose stream was cut may hold more than the model knows: its count is a range.
    const int lo = int(moved.tokens.size()), hi = lo + moved.maybe_more;
    std::string wrong;
    // check reuse.slot-action-count: a save, restore or erase counting other than the slot or file held
    if (n < lo || n > hi)
        wrong = cat("the server's count is ", n, " tokens, but ",
                    op.action == SlotAction::restore ? cat("file ", op.file, " holds ") : cat("slot ", op.slot, " held "), lo,
                    hi > lo ? cat(" to ", hi) : "");
    states_.act(op);
    return wrong;
}

std::string SlotCacheModel::on_embedding(const Embed&, const std::vector<std::vector<float>>&) { return ""; }  // no cache_n
std::string SlotCacheModel::on_lora(const Lora& op) { return states_.lora(op), ""; }

void SlotCacheModel::tally(ServerTally& t) const {
    t.cache_n += reused_, t.cache_allowed += allowed_, t.stale += stale_, t.lost += lost_, t.slot_actions += actions_;
    t.restored += restored_, t.unbounded += unbounded_;
    t.drafted += drafted_, t.accepted += accepted_;
}

// ---- GroundTruth

GroundTruth::GroundTruth(targets::llamaserver::ServerSetup setup, const ServerSettings& s, int model_ctx, int vocab,
                         double timeout_s)
    : process_(std::move(setup)), cache_reuse_(s.cache_reuse), shift_ctx_(s.shift_ctx(model_ctx)), vocab_(vocab),
      speculative_(s.draft > 0 || s.ngram), timeout_s_(timeout_s),
      tolerance_(s.tolerance()), states_(s, model_ctx, Held{}) {}

std::string GroundTruth::compare(const ServerAnswer& got, const ServerAnswer& truth, bool sampled) {
    std::size_t n = got.cut ? std::min(got.tokens.size(), truth.tokens.size()) : truth.tokens.size();
    if (sampled && speculative_) n = std::min<std::size_t>(n, 1);
    // check ground-truth.token-count: another number of tokens than the fresh server's
    if (!got.cut && got.tokens.size() != truth.tokens.size())
        return cat(got.tokens.size(), " tokens generated, the ground truth ", truth.tokens.size());
    for (std::size_t i = 0; i < n; ++i) {
        // check ground-truth.token: another token than the fresh server's
        if (got.tokens[i] != truth.tokens[i]) {
            // A sampled token two roundings of the same logits may draw apart: the
            // truth's whole distribution (n_probs: the vocabulary) shows where the cut-offs lie.
            if (sampled && !uncertain_cut(truth.top[i], tolerance_).empty()) return ++uncertain_, "";
            return cat("generated token ", i, " is ", got.tokens[i], ", the ground truth's ", truth.tokens[i],
                       sampled ? " (sampled; every sampler cut-off of the ground truth's distribution is clear of the tolerance)"
                               : "");
        }
        for (const auto& [id, logprob] : got.top[i]) {
            const int want = id;  // clang 14 cannot capture a structured binding in a lambda
            const auto it = std::find_if(truth.top[i].begin(), truth.top[i].end(), [want](const auto& p) { return p.first == want; });
            if (it == truth.top[i].end()) continue;  // a near tie ordered otherwise: the logprob oracle judges it
            // check ground-truth.logprob: a logprob off the fresh server's
            if (!(std::fabs(it->second - logprob) <= tolerance_))
                return cat("generated token ", i, ": token ", id, " logprob ", logprob, ", the ground truth's ", it->second);
        }
    }
    return "";
}

std::string GroundTruth::on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) {
    std::optional<ServerAnswer> truth;
    return states_.complete(c, answers, [&](Held& held, const Held& before, const ServerAnswer& a) -> std::string {
        const ReusePlan plan = plan_reuse(before.tokens, c.prompt, cache_reuse_);
        const bool fresh = plan.chunks.empty() && plan.n_past <= before.fresh;
        held.tokens = held_after(c, a, shift_ctx_);
        held.fresh = fresh ? 1 << 30 : std::min(before.fresh, plan.chunks.empty() ? 1 << 30 : plan.chunks.front().to);
        // A context shift moved every row past its kept front: not what a fresh prompt computes there.
        const std::vector<ContextShift> shifts = context_shifts(c, a, shift_ctx_);
        if (!shifts.empty()) held.fresh = std::min(held.fresh, shifts.front().keep);
        if (!fresh) return ++skipped_, "";
        if (!truth) truth = ask(c);
        // Sampled copies (n_cmpl) draw their own tokens: only the first is the ground truth's.
        if (c.temperature > 0 && a.index > 0) return "";
        ++compared_;
        return compare(a, *truth, c.temperature > 0);
    });
}

// `c` sent to the ground truth: one slot, no cache, not streamed, with its LoRA scales named.
ServerAnswer GroundTruth::ask(const Completion& c) {
    Completion one = c;
    one.slot = 0, one.n_cmpl = 1, one.stream = false, one.cancel_after = 0;
    one.lora = states_.scales(c);  // named: the ground truth's own scales are never set
    nlohmann::json body = completion_body(one);
    body["cache_prompt"] = false;
    body["n_probs"] = vocab_;  // every token's logprob: where a sampled draw's cut-offs lie
    const auto got = targets::llamaserver::http_request(process_.port(), "POST", "/completion", body.dump(), timeout_s_);
    require(got.status == 200, "the ground-truth server answered ", got.status, ": ", got.body.substr(0, 300),
            "; its log's last lines:\n", process_.log_tail(8));
    return parse_completion(got.body, false).at(0);
}

std::string GroundTruth::on_slot(const Slot& op, int) { return states_.act(op), ""; }
std::string GroundTruth::on_embedding(const Embed&, const std::vector<std::vector<float>>&) { return ""; }  // the reference judges those
std::string GroundTruth::on_lora(const Lora& op) { return states_.lora(op), ""; }

void GroundTruth::tally(ServerTally& t) const {
    t.truth_compared += compared_, t.truth_skipped += skipped_, t.truth_uncertain += uncertain_;
}

// ---- EmbeddingOracle

std::vector<float> reference_embedding(const Model& model, const std::vector<int>& tokens, const std::string& pooling,
                                       KvType kv_type) {
    ReferenceKv kv(model.config(), kv_type);
    std::vector<double> sum(std::size_t(model.config().dim), 0.0);
    std::vector<float> hidden;
    for (std::size_t pos = 0; pos < tokens.size(); ++pos) {
        reference_forward(model, kv, tokens[pos], int(pos), Adapters::none(), &hidden);
        if (pooling == "last") std::fill(sum.begin(), sum.end(), 0.0);
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += hidden[i];
    }
    double norm = 0;
    for (double x : sum) norm += x * x;
    norm = std::sqrt(norm);
    std::vector<float> out(sum.size());
    for (std::size_t i = 0; i < sum.size(); ++i) out[i] = norm > 0 ? float(sum[i] / norm) : 0.0f;
    return out;
}

EmbeddingOracle::EmbeddingOracle(const ServerSettings& s, const Model& model)
    : model_(model), pooling_(s.pooling), kv_type_(s.kv_type), tolerance_(s.tolerance()) {}

std::string EmbeddingOracle::on_completion(const Completion&, const std::vector<ServerAnswer>&) { return ""; }
std::string EmbeddingOracle::on_slot(const Slot&, int) { return ""; }
std::string EmbeddingOracle::on_lora(const Lora&) { return ""; }  // an embedding server has no adapters

std::string EmbeddingOracle::on_embedding(const Embed& op, const std::vector<std::vector<float>>& embeddings) {
    for (std::size_t k = 0; k < op.inputs.size(); ++k) {
        const std::vector<int>& input = op.inputs[k];
        const std::vector<float>& got = embeddings.at(k);
        const std::vector<float> want = reference_embedding(model_, input, pooling_, kv_type_);
        const std::string which = cat("input ", k, " of ", op.inputs.size(), " (", input.size(), " tokens)");
        // check embeddings.size: an embedding of another width than the model's
        if (got.size() != want.size()) return cat(which, ": an embedding of ", got.size(), " floats, the model's is ", want.size());
        ++judged_;
        double d = 0;
        std::size_t at = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
            if (std::fabs(double(got[i]) - want[i]) > d) d = std::fabs(double(got[i]) - want[i]), at = i;
        worst_ = std::max(worst_, d);
        // check embeddings.component: a component off the reference's
        if (!(d <= tolerance_))
            return cat(which, ": ", pooling_, "-pooled embedding component ", at, " is ", got[at], ", the reference's ", want[at],
                       " (|difference| ", d, " > ", tolerance_, ")");
    }
    return "";
}

void EmbeddingOracle::tally(ServerTally& t) const {
    t.embeddings += judged_, t.worst_embedding = std::max(t.worst_embedding, worst_);
}

}  // namespace kvweld::sim::server
