// What passes between the client and the server, and the oracles'
// tallies (sim/server/server_exchange.hpp).
#include "sim/server/server_exchange.hpp"

#include "util/cat.hpp"

#include <algorithm>

namespace kvweld::sim::server {

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
    cache_n += o.cache_n, cache_allowed += o.cache_allowed, stale += o.stale, lost += o.lost, slot_actions += o.slot_actions;
    truth_compared += o.truth_compared, truth_skipped += o.truth_skipped;
    embeddings += o.embeddings, worst_embedding = std::max(worst_embedding, o.worst_embedding);
}

std::vector<std::string> ServerTally::lines() const {
    std::string kinds;
    for (int k = 0; k < kServerOpKinds; ++k) kinds += cat(k ? ", " : "", to_string(ServerOpKind(k)), " ", ops[std::size_t(k)]);
    return {cat("logprobs: ", tokens_judged, " generated tokens judged against kvweld's reference forward over the slot's KV; max "
                "|logprob - reference| ", worst_logprob, " (tolerance ", kLogprobTolerance, ")"),
            cat("reuse: cache_n ", cache_n, " of the ", cache_allowed, " prompt tokens the slots held (stale reads ", stale,
                ", lost reuse ", lost, "); ", slot_actions, " slot actions' counts against the slot or file they moved"),
            cat("ground-truth: ", truth_compared, " completions compared with a ground-truth server (one slot, no cache, each "
                "request fresh); ", truth_skipped, " skipped where the slot reused KV a shifted chunk left"),
            cat("embeddings: ", embeddings, " pooled embeddings judged against kvweld's reference; max |difference| ",
                worst_embedding, " (tolerance ", kLogprobTolerance, ")"),
            cat("ops run: ", kinds)};
}

}  // namespace kvweld::sim::server
