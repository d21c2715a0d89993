// What passes between the client and the server, and the oracles'
// tallies (sim/server/server_exchange.hpp).
#include "sim/server/server_exchange.hpp"

#include "util/cat.hpp"

#include <algorithm>

namespace kvweld::sim::server {

// ---- what the server chose

nlohmann::json observed_json(const std::vector<ServerAnswer>& answers) {
    nlohmann::json out = nlohmann::json::array();
    for (const ServerAnswer& a : answers) {
        nlohmann::json one = {{"slot", a.slot}, {"cache_n", a.cache_n}, {"tokens", a.tokens}};
        if (a.cut) one["cut"] = true, one["held"] = a.held;
        out.push_back(one);
    }
    return out;
}

std::vector<ServerAnswer> answers_from_observed(const nlohmann::json& got) {
    std::vector<ServerAnswer> out;
    for (const nlohmann::json& one : got) {
        ServerAnswer a;
        a.slot = one.at("slot").get<int>(), a.cache_n = one.at("cache_n").get<int>();
        a.tokens = one.at("tokens").get<std::vector<int>>();
        a.cut = one.value("cut", false);
        a.held = one.value("held", -1);
        a.index = int(out.size());
        out.push_back(std::move(a));
    }
    return out;
}

std::vector<ContextShift> context_shifts(const Completion& c, const ServerAnswer& a, int shift_ctx) {
    std::vector<ContextShift> out;
    if (shift_ctx <= 0) return out;
    int len = int(c.prompt.size());
    const int keep = std::min(shift_ctx - 4, c.n_keep < 0 ? int(c.prompt.size()) : c.n_keep);  // no BOS: nothing added
    for (int k = 0; k + 1 < int(a.tokens.size()); ++k) {  // each generated token but the last is decoded
        if (len + 1 >= shift_ctx) {
            const int left = len - keep;
            const int discard = std::clamp(left / 2, 0, std::max(0, left - 1));
            out.push_back({k, len, keep, discard});
            len -= discard;
        }
        ++len;
    }
    return out;
}

std::vector<int> held_after(const Completion& c, const ServerAnswer& a, int shift_ctx) {
    std::vector<int> held = c.prompt;
    const std::vector<ContextShift> shifts = context_shifts(c, a, shift_ctx);
    std::size_t next = 0;
    for (std::size_t k = 0; k < a.tokens.size(); ++k) {
        if (next < shifts.size() && shifts[next].before == int(k)) {
            const ContextShift& s = shifts[next++];
            held.erase(held.begin() + s.keep, held.begin() + s.keep + s.discard);
        }
        held.push_back(a.tokens[k]);
    }
    if (a.cut && a.held >= 0 && std::size_t(a.held) <= held.size()) held.resize(std::size_t(a.held));
    else if (!a.tokens.empty()) held.pop_back();
    return held;
}

std::vector<Answered> answered(const ServerOp& op, const nlohmann::json& observed) {
    std::vector<Answered> out;
    if (const auto* c = std::get_if<Complete>(&op.args)) out.push_back({c->request, answers_from_observed(observed)});
    if (const auto* b = std::get_if<Burst>(&op.args))
        for (std::size_t k = 0; k < b->requests.size() && k < observed.size(); ++k)
            out.push_back({b->requests[k], answers_from_observed(observed[k])});
    // A stream, then what went out while it ran (the order the oracles judge them in).
    if (const auto* d = std::get_if<During>(&op.args); d && observed.is_object() && observed.contains("stream")) {
        out.push_back({d->stream, answers_from_observed(observed.at("stream"))});
        if (const auto* c = std::get_if<Completion>(&d->then)) out.push_back({*c, answers_from_observed(observed.at("then"))});
    }
    return out;
}

std::optional<Lora> scales_set(const ServerOp& op) {
    if (const auto* l = std::get_if<Lora>(&op.args)) return *l;
    if (const auto* d = std::get_if<During>(&op.args))
        if (const auto* l = std::get_if<Lora>(&d->then)) return *l;
    return std::nullopt;
}

std::uint64_t draft_seed(std::uint64_t seed, int draft) { return draft == 1 ? seed : seed ^ 0xd4af7ULL; }

// ---- LoRA adapters

std::vector<std::shared_ptr<const LoraAdapter>> server_loras(const ModelConfig& config, std::uint64_t seed, int n) {
    std::vector<std::shared_ptr<const LoraAdapter>> out;
    for (int i = 0; i < n; ++i) out.push_back(LoraAdapter::random(config, 2 << i, float(2 << i), seed ^ (0x10a0ULL + std::uint64_t(i))));
    return out;
}

Adapters adapters_at(const ModelConfig& config, const std::vector<std::shared_ptr<const LoraAdapter>>& loras,
                     const std::vector<float>& scales) {
    std::vector<LoraUse> uses;
    for (std::size_t i = 0; i < loras.size() && i < scales.size(); ++i)
        if (scales[i] != 0) uses.push_back({loras[i], scales[i]});
    Adapters a;
    a.set_loras(config, std::move(uses));
    return a;
}

nlohmann::json lora_body(const std::vector<float>& scales) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < scales.size(); ++i) out.push_back({{"id", i}, {"scale", scales[i]}});
    return out;
}

// ---- the oracles' tallies

void ServerTally::add(const ServerTally& o) {
    for (std::size_t k = 0; k < ops.size(); ++k) ops[k] += o.ops[k];
    tokens_judged += o.tokens_judged, worst_logprob = std::max(worst_logprob, o.worst_logprob);
    drafted += o.drafted, accepted += o.accepted, context_shifts += o.context_shifts;
    cache_n += o.cache_n, cache_allowed += o.cache_allowed, stale += o.stale, lost += o.lost, slot_actions += o.slot_actions;
    restored += o.restored, unbounded += o.unbounded;
    truth_compared += o.truth_compared, truth_skipped += o.truth_skipped, truth_uncertain += o.truth_uncertain;
    embeddings += o.embeddings, worst_embedding = std::max(worst_embedding, o.worst_embedding);
    for (const auto& [name, n] : o.ran) ran[name] += n;
    for (const auto& [name, n] : o.variants) variants[name] += n;
    for (const auto& [name, whys] : o.not_run)
        for (const auto& [why, n] : whys) not_run[name][why] += n;
}

std::string ServerTally::variants_line() const {
    std::string out = "op variants sent:";
    for (const auto& [name, n] : variants) out += cat(" ", name, " ", n);
    return out;
}

// Which oracles judged how many runs, and why the others could not.
std::string ServerTally::oracles_line() const {
    std::string out = "oracles: ";
    bool first = true;
    for (const auto& [name, n] : ran) out += cat(first ? "" : ", ", name, " judged ", n, n == 1 ? " run" : " runs"), first = false;
    for (const auto& [name, whys] : not_run)
        for (const auto& [why, n] : whys) out += cat(first ? "" : "; ", name, " not in ", n, n == 1 ? " run" : " runs", ": ", why), first = false;
    return first ? out + "none" : out;
}

std::vector<std::string> ServerTally::lines() const {
    std::string kinds;
    for (int k = 0; k < kServerOpKinds; ++k) kinds += cat(k ? ", " : "", to_string(ServerOpKind(k)), " ", ops[std::size_t(k)]);
    return {cat("logprobs: ", tokens_judged, " generated tokens judged against kvweld's reference forward over the slot's KV; max "
                "|logprob - reference| ", worst_logprob, " (tolerance ", kv_tolerances(), "); drafts (-md or ngram): ", accepted, " of ",
                drafted, " accepted; context shifts: ", context_shifts),
            cat("reuse: cache_n ", cache_n, " of the ", cache_allowed, " prompt tokens the slots held (stale reads ", stale,
                ", lost reuse ", lost, "); ", slot_actions, " slot actions' counts against the slot or file they moved; ",
                restored, " answers bounded below by a context checkpoint the server made, ", unbounded,
                " with no lower bound (a sliding window's memory, a chunk or context shift on another arch's)"),
            cat("ground-truth: ", truth_compared, " completions compared with a ground-truth server (one slot, no cache, each "
                "request fresh); ", truth_skipped, " skipped where the slot reused KV a shifted chunk left; ", truth_uncertain,
                " compared up to a sampled token where a sampler cut-off lay within the tolerance (past it the two diverge by "
                "rounding)"),
            cat("embeddings: ", embeddings, " pooled embeddings judged against kvweld's reference; max |difference| ",
                worst_embedding, " (tolerance ", kv_tolerances(), ")"),
            cat("ops run: ", kinds), variants_line(), oracles_line()};
}

}  // namespace kvweld::sim::server
