// The server simulator's oracles (sim/server/server_oracles.hpp).
#include "sim/server/server_oracles.hpp"

#include "targets/llamaserver/http.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim::server {

namespace {

constexpr int kTop = 4;  // n_probs asked

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

// The first answer's complaint of a completion's (n_cmpl: named by its index).
void keep_first(std::string& wrong, const std::string& why, std::size_t answers, const ServerAnswer& a) {
    if (wrong.empty() && !why.empty()) wrong = cat(answers > 1 ? cat("completion ", a.index, ": ") : "", why);
}

}  // namespace

ReusePlan plan_reuse(const std::vector<int>& held, const std::vector<int>& prompt, int cache_reuse) {
    ReusePlan plan;
    std::size_t n_past = 0;
    while (n_past < held.size() && n_past < prompt.size() && held[n_past] == prompt[n_past]) ++n_past;
    for (std::size_t from = n_past, to = n_past; cache_reuse > 0 && from < held.size() && to < prompt.size();) {
        std::size_t n = 0;
        while (from + n < held.size() && to + n < prompt.size() && held[from + n] == prompt[to + n]) ++n;
        if (n < std::size_t(cache_reuse)) {
            ++from;
            continue;
        }
        plan.chunks.push_back({int(from), int(to), int(n)});
        n_past += n, from += n, to += n;
    }
    plan.n_past = int(std::min(n_past, prompt.size() - 1));
    return plan;
}

const std::vector<float>& scales_of(const Completion& c, const std::vector<float>& server_scales) {
    return c.lora.empty() ? server_scales : c.lora;
}

std::vector<const ServerAnswer*> parent_first(const std::vector<ServerAnswer>& answers) {
    std::vector<const ServerAnswer*> out;
    for (const ServerAnswer& a : answers) out.push_back(&a);
    std::stable_sort(out.begin(), out.end(), [](const ServerAnswer* x, const ServerAnswer* y) { return x->index < y->index; });
    return out;
}

// ---- LogprobOracle

LogprobOracle::LogprobOracle(const ServerSettings& s, const Model& model, std::vector<std::shared_ptr<const LoraAdapter>> loras)
    : model_(model), kv_type_(s.kv_type), tolerance_(s.tolerance()), cache_reuse_(s.cache_reuse),
      shift_ctx_(s.shift_ctx(model.config().max_seq_len)),
      slots_(std::size_t(s.slots), Mirror{{}, ReferenceKv(model.config(), s.kv_type)}),
      ram_(s.prompt_cache(model.config().max_seq_len)), loras_(std::move(loras)), global_(loras_.size(), kServerLoraScale) {
    require(int(loras_.size()) == s.loras, "LogprobOracle: ", loras_.size(), " adapters for settings with ", s.loras);
}

std::string LogprobOracle::on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) {
    std::string wrong;
    ram_.before_launch(slots_, c, answers);
    // The copies (n_cmpl) start from the parent's slot as it was before the prompt.
    std::optional<Mirror> before;
    for (const ServerAnswer* a : parent_first(answers)) {
        require(a->slot >= 0 && a->slot < int(slots_.size()), "answer from slot ", a->slot, ": the server has ", slots_.size());
        Mirror& m = slots_[std::size_t(a->slot)];
        if (!before) before = m;
        else m = *before;
        const std::string why = judge(m, c, *a);
        drafted_ += a->drafted, accepted_ += a->accepted;
        if (a->index > 0) m.clear();  // a copy's slot drops its cells when it is released
        keep_first(wrong, why, answers.size(), *a);
    }
    return wrong;
}

std::string LogprobOracle::judge(Mirror& m, const Completion& c, const ServerAnswer& a) {
    // KV computed with other LoRA scales is not this request's: the server must compute it again.
    const std::vector<float>& scales = scales_of(c, global_);
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
        if (c.temperature == 0 && lp[std::size_t(token)] < best - tolerance_)
            wrong = cat("generated token ", i, " is ", token, " (reference logprob ", lp[std::size_t(token)],
                        "), but the reference's most likely has ", best);
        std::vector<std::pair<int, double>> seen = a.top[std::size_t(i)];
        seen.emplace_back(token, a.chosen[std::size_t(i)]);
        for (const auto& [id, logprob] : seen) {
            const double d = std::fabs(logprob - lp[std::size_t(id)]);
            worst_ = std::max(worst_, d);
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

std::string LogprobOracle::on_slot(const Slot& op, int) {
    if (files_.size() <= std::size_t(op.file)) files_.resize(std::size_t(op.file) + 1, Mirror{{}, ReferenceKv(model_.config(), kv_type_)});
    Mirror& s = slots_.at(std::size_t(op.slot));
    switch (op.action) {
        case SlotAction::save: files_[std::size_t(op.file)] = s; break;
        case SlotAction::restore: s = files_[std::size_t(op.file)]; break;
        case SlotAction::erase: s.clear(); break;
    }
    return "";
}

std::string LogprobOracle::on_embedding(const Embed&, const std::vector<std::vector<float>>&) { return ""; }  // no tokens generated
std::string LogprobOracle::on_lora(const Lora& op) { return global_ = op.scales, ""; }

void LogprobOracle::tally(ServerTally& t) const {
    t.tokens_judged += judged_, t.worst_logprob = std::max(t.worst_logprob, worst_);
    t.drafted += drafted_, t.accepted += accepted_, t.context_shifts += shifts_;
}

// ---- SlotCacheModel

SlotCacheModel::SlotCacheModel(const ServerSettings& s, int model_ctx)
    : slots_(std::size_t(s.slots)), ram_(s.prompt_cache(model_ctx)), cache_reuse_(s.cache_reuse),
      shift_ctx_(s.shift_ctx(model_ctx)), global_(std::size_t(s.loras), kServerLoraScale) {}

SlotCacheModel::Held SlotCacheModel::after(const Completion& c, const ServerAnswer& a) const {
    // A cut stream: the server may have decoded up to n_predict - 1 tokens before it heard.
    const std::vector<int> held = held_after(c, a, shift_ctx_);
    const bool counted = int(held.size()) == a.held;  // the server's count named only tokens the client saw
    return {held, a.cut && !counted ? c.n_predict - int(a.tokens.size()) : 0, scales_of(c, global_)};
}

std::pair<int, int> SlotCacheModel::bounds(const Held& before, const Completion& c) const {
    // KV computed with other LoRA scales holds nothing this request may reuse.
    if (!before.tokens.empty() && before.scales != scales_of(c, global_)) return {0, 0};
    const int lo = plan_reuse(before.tokens, c.prompt, cache_reuse_).n_past;
    // Past the known tokens, the ones a cut stream may have left: the prompt may match them too.
    const bool to_the_end = before.maybe_more > 0 && lo == int(before.tokens.size());
    return {lo, to_the_end ? std::min(lo + before.maybe_more, int(c.prompt.size()) - 1) : lo};
}

std::pair<int, int> SlotCacheModel::allowed(const Completion& c, int slot) const {
    // The RAM cache's part first, on copies: what `slot` would hold once the server took it.
    std::vector<Held> slots = slots_;
    PromptCacheModel<Held> ram = ram_;
    ServerAnswer there;
    there.slot = slot;
    ram.before_launch(slots, c, {there});
    return bounds(slots.at(std::size_t(slot)), c);
}

std::string SlotCacheModel::judge(const Held& before, const Completion& c, const ServerAnswer& a) {
    const auto [lo, hi] = bounds(before, c);
    reused_ += a.cache_n, allowed_ += std::clamp(a.cache_n, lo, hi);
    if (a.cache_n > hi)
        return ++stale_, cat("cache_n ", a.cache_n, " but slot ", a.slot, " holds only ", hi, " of the prompt (a stale read)");
    if (a.cache_n < lo)
        return ++lost_, cat("cache_n ", a.cache_n, " but slot ", a.slot, " holds ", lo, " of the prompt (lost reuse)");
    return "";
}

// An unpinned request goes to the slot holding the most of its prompt,
// where one holds over a tenth of it (get_available_slot). Not judged
// while a slot holds tokens of a cut stream the model does not know.
std::string SlotCacheModel::similar_slot(const Completion& c, const std::vector<ServerAnswer>& answers) const {
    std::vector<const std::vector<int>*> held;
    for (const Held& h : slots_) {
        if (h.maybe_more > 0) return "";
        held.push_back(&h.tokens);
    }
    const int want = choose_slot(held, c).by_similarity;
    for (const ServerAnswer& a : answers)
        if (a.index == 0 && want >= 0 && a.slot != want)
            return cat("served by slot ", a.slot, ", but slot ", want, " holds the most of the prompt (", common_prefix(slots_[std::size_t(want)].tokens, c.prompt),
                       " of ", c.prompt.size(), " tokens): the server takes the most similar slot");
    return "";
}

// What a cut stream's slot holds once idle: what the client saw but the
// last token, up to the n_predict - 1 the server may have decoded.
std::string SlotCacheModel::judge_cut(const Completion& c, const ServerAnswer& a) {
    if (a.held < 0) return "";  // a trace from before the count was read
    const int lo = int(c.prompt.size() + a.tokens.size()) - 1, hi = int(c.prompt.size()) + c.n_predict - 1;
    if (a.held >= lo && a.held <= hi) return "";
    ++stale_;
    return cat("slot ", a.slot, " holds ", a.held, " tokens after the stream was cut at ", a.tokens.size(), " of ", c.n_predict,
               ": the prompt's ", c.prompt.size(), " and what it generated allow ", lo, " to ", hi);
}

std::string SlotCacheModel::on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) {
    std::string wrong = similar_slot(c, answers);
    ram_.before_launch(slots_, c, answers);
    std::optional<Held> before;
    for (const ServerAnswer* a : parent_first(answers)) {
        require(a->slot >= 0 && a->slot < int(slots_.size()), "answer from slot ", a->slot, ": the server has ", slots_.size());
        Held& held = slots_[std::size_t(a->slot)];
        if (!before) before = held;
        // A copy (n_cmpl) reports the parent's prompt statistics; a cut
        // stream never got its final event, which carries them.
        const std::string why = a->cut ? judge_cut(c, *a) : judge(*before, c, *a);
        keep_first(wrong, why, answers.size(), *a);
        // A copy's slot drops its cells when it is released ("the parent's context is enough").
        held = a->index > 0 ? Held{} : after(c, *a);
    }
    return wrong;
}

std::string SlotCacheModel::on_slot(const Slot& op, int n) {
    if (files_.size() <= std::size_t(op.file)) files_.resize(std::size_t(op.file) + 1);
    Held& held = slots_.at(std::size_t(op.slot));
    Held& saved = files_[std::size_t(op.file)];
    const Held& moved = op.action == SlotAction::restore ? saved : held;
    ++actions_;
    // A slot whose stream was cut may hold more than the model knows: its count is a range.
    const int lo = int(moved.tokens.size()), hi = lo + moved.maybe_more;
    const std::string wrong = n >= lo && n <= hi ? "" : cat("the server's count is ", n, " tokens, but ",
        op.action == SlotAction::restore ? cat("file ", op.file, " holds ") : cat("slot ", op.slot, " held "), lo,
        hi > lo ? cat(" to ", hi) : "");
    switch (op.action) {
        case SlotAction::save: saved = held; break;
        case SlotAction::restore: held = saved; break;
        case SlotAction::erase: held = {}; break;
    }
    return wrong;
}

std::string SlotCacheModel::on_embedding(const Embed&, const std::vector<std::vector<float>>&) { return ""; }  // no cache_n
std::string SlotCacheModel::on_lora(const Lora& op) { return global_ = op.scales, ""; }

void SlotCacheModel::tally(ServerTally& t) const {
    t.cache_n += reused_, t.cache_allowed += allowed_, t.stale += stale_, t.lost += lost_, t.slot_actions += actions_;
}

// ---- GroundTruth

GroundTruth::GroundTruth(targets::llamaserver::ServerSetup setup, const ServerSettings& s, int model_ctx, double timeout_s)
    : process_(std::move(setup)), slots_(std::size_t(s.slots)), ram_(s.prompt_cache(model_ctx)), cache_reuse_(s.cache_reuse),
      shift_ctx_(s.shift_ctx(model_ctx)), timeout_s_(timeout_s), tolerance_(s.tolerance()),
      global_(std::size_t(s.loras), kServerLoraScale) {}

std::string GroundTruth::compare(const ServerAnswer& got, const ServerAnswer& truth) const {
    const std::size_t n = got.cut ? std::min(got.tokens.size(), truth.tokens.size()) : truth.tokens.size();
    if (!got.cut && got.tokens.size() != truth.tokens.size())
        return cat(got.tokens.size(), " tokens generated, the ground truth ", truth.tokens.size());
    for (std::size_t i = 0; i < n; ++i) {
        if (got.tokens[i] != truth.tokens[i])
            return cat("generated token ", i, " is ", got.tokens[i], ", the ground truth's ", truth.tokens[i]);
        for (const auto& [id, logprob] : got.top[i]) {
            const int want = id;  // clang 14 cannot capture a structured binding in a lambda
            const auto it = std::find_if(truth.top[i].begin(), truth.top[i].end(), [want](const auto& p) { return p.first == want; });
            if (it == truth.top[i].end()) continue;  // a near tie ordered otherwise: the logprob oracle judges it
            if (!(std::fabs(it->second - logprob) <= tolerance_))
                return cat("generated token ", i, ": token ", id, " logprob ", logprob, ", the ground truth's ", it->second);
        }
    }
    return "";
}

std::string GroundTruth::on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) {
    std::string wrong;
    ram_.before_launch(slots_, c, answers);
    std::optional<Held> before;
    std::optional<ServerAnswer> truth;
    for (const ServerAnswer* a : parent_first(answers)) {
        Held& held = slots_.at(std::size_t(a->slot));
        if (!before) before = held;
        const ReusePlan plan = plan_reuse(before->tokens, c.prompt, cache_reuse_);
        const bool fresh = plan.chunks.empty() && plan.n_past <= before->fresh;
        held.tokens = held_after(c, *a, shift_ctx_);
        held.fresh = fresh ? 1 << 30 : std::min(before->fresh, plan.chunks.empty() ? 1 << 30 : plan.chunks.front().to);
        // A context shift moved every row past its kept front: not what a fresh prompt computes there.
        const std::vector<ContextShift> shifts = context_shifts(c, *a, shift_ctx_);
        if (!shifts.empty()) held.fresh = std::min(held.fresh, shifts.front().keep);
        if (a->index > 0) held = {};  // a copy's slot drops its cells when it is released
        if (!fresh) {
            ++skipped_;
            continue;
        }
        if (!truth) {
            Completion one = c;
            one.slot = 0, one.n_cmpl = 1, one.stream = false, one.cancel_after = 0;
            one.lora = scales_of(c, global_);  // named: the ground truth's own scales are never set
            nlohmann::json body = completion_body(one);
            body["cache_prompt"] = false;
            const auto got = targets::llamaserver::http_request(process_.port(), "POST", "/completion", body.dump(), timeout_s_);
            require(got.status == 200, "the ground-truth server answered ", got.status, ": ", got.body.substr(0, 300),
                    "; its log's last lines:\n", process_.log_tail(8));
            truth = parse_completion(got.body, false).at(0);
        }
        // Sampled copies (n_cmpl) draw their own tokens: only the first is the ground truth's.
        if (c.temperature > 0 && a->index > 0) continue;
        ++compared_;
        const std::string why = compare(*a, *truth);
        keep_first(wrong, why, answers.size(), *a);
    }
    return wrong;
}

std::string GroundTruth::on_slot(const Slot& op, int) {
    if (files_.size() <= std::size_t(op.file)) files_.resize(std::size_t(op.file) + 1);
    Held& held = slots_.at(std::size_t(op.slot));
    switch (op.action) {
        case SlotAction::save: files_[std::size_t(op.file)] = held; break;
        case SlotAction::restore: held = files_[std::size_t(op.file)]; break;
        case SlotAction::erase: held = {}; break;
    }
    return "";
}

std::string GroundTruth::on_embedding(const Embed&, const std::vector<std::vector<float>>&) { return ""; }  // the reference judges those
std::string GroundTruth::on_lora(const Lora& op) { return global_ = op.scales, ""; }

void GroundTruth::tally(ServerTally& t) const { t.truth_compared += compared_, t.truth_skipped += skipped_; }

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
        if (got.size() != want.size()) return cat(which, ": an embedding of ", got.size(), " floats, the model's is ", want.size());
        ++judged_;
        double d = 0;
        std::size_t at = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
            if (std::fabs(double(got[i]) - want[i]) > d) d = std::fabs(double(got[i]) - want[i]), at = i;
        worst_ = std::max(worst_, d);
        if (!(d <= tolerance_))
            return cat(which, ": ", pooling_, "-pooled embedding component ", at, " is ", got[at], ", the reference's ", want[at],
                       " (|difference| ", d, " > ", tolerance_, ")");
    }
    return "";
}

void EmbeddingOracle::tally(ServerTally& t) const {
    t.embeddings += judged_, t.worst_embedding = std::max(t.worst_embedding, worst_);
}

// ---- the wire format

nlohmann::json completion_body(const Completion& c) {
    nlohmann::json body = {{"prompt", c.prompt},         {"n_predict", c.n_predict},  {"n_probs", kTop},
                           {"temperature", c.temperature}, {"return_tokens", true},    {"cache_prompt", true},
                           {"id_slot", c.slot},          {"stream", c.stream}};
    if (c.n_cmpl > 1) body["n_cmpl"] = c.n_cmpl;
    if (c.n_keep != 0) body["n_keep"] = c.n_keep;
    if (!c.lora.empty()) body["lora"] = lora_body(c.lora);
    if (c.temperature > 0) body["seed"] = c.seed;
    return body;
}

namespace {

// One completion_probabilities entry: the chosen token's logprob and the top ones.
void add_probs(ServerAnswer& a, const nlohmann::json& step) {
    a.chosen.push_back(step.at("logprob").get<double>());
    a.top.emplace_back();
    for (const nlohmann::json& p : step.at("top_logprobs")) a.top.back().emplace_back(p.at("id").get<int>(), p.at("logprob").get<double>());
}

ServerAnswer parse_final(const nlohmann::json& j) {
    require(j.is_object() && j.contains("tokens") && j.contains("completion_probabilities") && j.contains("timings"),
            "server answer: no tokens, completion_probabilities or timings in '", j.dump().substr(0, 200), "'");
    ServerAnswer a;
    a.tokens = j.at("tokens").get<std::vector<int>>();
    a.cache_n = j.at("timings").at("cache_n").get<int>();
    a.drafted = j.at("timings").value("draft_n", 0), a.accepted = j.at("timings").value("draft_n_accepted", 0);
    a.slot = j.value("id_slot", -1);
    a.index = j.value("index", 0);
    for (const nlohmann::json& step : j.at("completion_probabilities")) add_probs(a, step);
    require(a.top.size() == a.tokens.size(), "server answer: ", a.tokens.size(), " tokens but ", a.top.size(),
            " completion_probabilities");
    return a;
}

// Server-sent events: each partial result adds its tokens to its index's
// answer; the final one (stop) brings the slot and timings. A stream the
// client cut has no final event for some: cut.
std::vector<ServerAnswer> parse_events(const std::string& body) {
    std::map<int, ServerAnswer> by_index;
    std::map<int, bool> done;
    for (std::size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
        const auto end = body.find('\n', at);
        if (end == std::string::npos) break;  // cut mid-event
        const nlohmann::json j = nlohmann::json::parse(body.substr(at + 6, end - at - 6), nullptr, false);
        at = end;
        if (j.is_discarded()) continue;  // "[DONE]" or a cut event
        const int index = j.value("index", 0);
        ServerAnswer& a = by_index[index];
        a.index = index;
        if (j.contains("id_slot")) a.slot = j.at("id_slot").get<int>();
        if (j.value("stop", false)) {
            done[index] = true;
            if (j.contains("timings")) {
                a.cache_n = j.at("timings").at("cache_n").get<int>();
                a.drafted = j.at("timings").value("draft_n", 0), a.accepted = j.at("timings").value("draft_n_accepted", 0);
            }
            continue;
        }
        const auto tokens = j.value("tokens", std::vector<int>{});
        a.tokens.insert(a.tokens.end(), tokens.begin(), tokens.end());
        if (j.contains("completion_probabilities"))
            for (const nlohmann::json& step : j.at("completion_probabilities")) add_probs(a, step);
        require(a.top.size() <= a.tokens.size(), "server event: ", a.tokens.size(), " tokens but ", a.top.size(),
                " completion_probabilities");
        // An event of several tokens (a draft's, accepted) carries one entry:
        // the others get what the whole answer reports for them, probability
        // 1 and no top list (finding speculative-logprobs-unset).
        while (a.top.size() < a.tokens.size()) a.chosen.push_back(0.0), a.top.emplace_back();
    }
    std::vector<ServerAnswer> out;
    for (auto& [index, a] : by_index) {
        a.cut = !done[index];
        out.push_back(std::move(a));
    }
    return out;
}

}  // namespace

std::vector<ServerAnswer> parse_completion(const std::string& body, bool stream) {
    if (stream) return parse_events(body);
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    require(!j.is_discarded(), "server answer: not JSON: '", body.substr(0, 200), "'");
    std::vector<ServerAnswer> out;
    if (j.is_array())
        for (const nlohmann::json& one : j) out.push_back(parse_final(one));
    else
        out.push_back(parse_final(j));
    return out;
}

}  // namespace kvweld::sim::server
