// llama-server's wire format as kvweld speaks it (sim/server/server_wire.hpp).
#include "sim/server/server_wire.hpp"

#include "sim/server/sampler_cut.hpp"
#include "util/error.hpp"

#include <map>

namespace kvweld::sim::server {

namespace {

constexpr int kTop = 4;  // n_probs asked

}  // namespace

nlohmann::json completion_body(const Completion& c) {
    nlohmann::json body = {{"prompt", c.prompt},         {"n_predict", c.n_predict},  {"n_probs", kTop},
                           {"temperature", c.temperature}, {"return_tokens", true},    {"cache_prompt", true},
                           {"id_slot", c.slot},          {"stream", c.stream}};
    if (c.n_cmpl > 1) body["n_cmpl"] = c.n_cmpl;
    if (c.n_keep != 0) body["n_keep"] = c.n_keep;
    if (!c.lora.empty()) body["lora"] = lora_body(c.lora);
    if (c.temperature > 0) {
        // The chain by name: the one sampler_cut.hpp knows where it cuts.
        body["seed"] = c.seed;
        body["samplers"] = {"top_k", "top_p", "min_p", "temperature"};
        body["top_k"] = kSamplerChain.top_k, body["top_p"] = kSamplerChain.top_p, body["min_p"] = kSamplerChain.min_p;
    }
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
