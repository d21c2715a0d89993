#include "sim/server_check.hpp"

#include "engine/gguf.hpp"
#include "engine/reference.hpp"
#include "targets/llamaserver/http.hpp"
#include "targets/llamaserver/server_process.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

namespace kvweld::sim {

namespace {

constexpr int kTop = 4;             // n_probs asked
constexpr double kTolerance = 1e-4;  // |logprob - reference|, as the GGUF test's logits
constexpr int kMargin = 8;           // positions left free at the end of the slot's context

std::vector<double> log_softmax(const std::vector<float>& logits) {
    const double top = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float l : logits) sum += std::exp(double(l) - top);
    std::vector<double> out(logits.size());
    for (std::size_t i = 0; i < logits.size(); ++i) out[i] = double(logits[i]) - top - std::log(sum);
    return out;
}

std::string list(const std::vector<int>& v) {
    std::string out;
    for (int t : v) out += cat(out.empty() ? "" : ",", t);
    return out;
}

// The seed's requests: a multi-turn chat (the last prompt, its answer and a
// few new tokens), a few-shot prompt (a prefix every such prompt shares, a
// new tail) or a fresh one; 1 to 6 tokens generated.
class RequestDraw {
public:
    RequestDraw(std::uint64_t seed, int vocab, int max_len) : rng_(seed ^ 0x5e5e5e5eULL), vocab_(vocab), max_len_(max_len) {
        shared_ = tokens(16);
    }
    std::pair<std::vector<int>, int> next(const std::vector<int>& last_prompt, const std::vector<int>& last_answer) {
        const int n_predict = int(rng_.range(1, 6));
        std::vector<int> prompt;
        switch (rng_.below(3)) {
            case 0:
                prompt = last_prompt;
                prompt.insert(prompt.end(), last_answer.begin(), last_answer.end());
                append(prompt, int(rng_.range(1, 4)));
                break;
            case 1: prompt = shared_, append(prompt, int(rng_.range(2, 8))); break;
            default: prompt = tokens(int(rng_.range(4, 16))); break;
        }
        // A chat that no longer fits starts again.
        if (int(prompt.size()) + n_predict > max_len_) prompt = tokens(int(rng_.range(4, 16)));
        return {prompt, n_predict};
    }

private:
    std::vector<int> tokens(int n) {
        std::vector<int> out;
        append(out, n);
        return out;
    }
    void append(std::vector<int>& v, int n) {
        for (int i = 0; i < n; ++i) v.push_back(int(rng_.below(std::uint64_t(vocab_))));
    }
    Rng rng_;
    int vocab_, max_len_;
    std::vector<int> shared_;
};

}  // namespace

ServerAnswer parse_server_answer(const std::string& text) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    require(j.is_object() && j.contains("tokens") && j.contains("completion_probabilities") && j.contains("timings"),
            "server answer: no tokens, completion_probabilities or timings in '", text.substr(0, 200), "'");
    ServerAnswer a;
    a.tokens = j.at("tokens").get<std::vector<int>>();
    a.cache_n = j.at("timings").at("cache_n").get<int>();
    for (const nlohmann::json& step : j.at("completion_probabilities")) {
        a.top.emplace_back();
        for (const nlohmann::json& p : step.at("top_logprobs")) a.top.back().emplace_back(p.at("id").get<int>(), p.at("logprob").get<double>());
    }
    require(a.top.size() == a.tokens.size(), "server answer: ", a.tokens.size(), " tokens but ", a.top.size(),
            " completion_probabilities");
    return a;
}

std::string LogprobOracle::judge(const std::vector<int>& prompt, const ServerAnswer& answer) {
    ReferenceKv kv(model_.config());
    std::vector<int> held = prompt;
    held.insert(held.end(), answer.tokens.begin(), answer.tokens.end());
    std::vector<double> lp;
    for (int pos = 0; pos + 1 < int(held.size()); ++pos) {
        lp = log_softmax(reference_forward(model_, kv, held[std::size_t(pos)], pos));
        const int i = pos - int(prompt.size()) + 1;  // the generated token this position predicts
        if (i < 0) continue;
        const int token = answer.tokens[std::size_t(i)];
        const double best = *std::max_element(lp.begin(), lp.end());
        ++judged_;
        if (lp[std::size_t(token)] < best - tolerance_)
            return cat("generated token ", i, " is ", token, " (reference logprob ", lp[std::size_t(token)],
                       "), but the reference's most likely has ", best);
        for (const auto& [id, logprob] : answer.top[std::size_t(i)]) {
            const double d = std::fabs(logprob - lp[std::size_t(id)]);
            worst_ = std::max(worst_, d);
            if (!(d <= tolerance_))
                return cat("generated token ", i, ": token ", id, " logprob ", logprob, ", reference ", lp[std::size_t(id)],
                           " (|difference| ", d, " > ", tolerance_, ")");
        }
    }
    return "";
}

std::string SlotCacheModel::judge(const std::vector<int>& prompt, const ServerAnswer& answer) {
    std::size_t lcp = 0;
    while (lcp < held_.size() && lcp < prompt.size() && held_[lcp] == prompt[lcp]) ++lcp;
    const int allowed = int(std::min(lcp, prompt.size() - 1));
    reused_ += answer.cache_n;
    allowed_ += allowed;
    // The slot now holds the prompt and every generated token but the last (never decoded).
    held_ = prompt;
    if (!answer.tokens.empty()) held_.insert(held_.end(), answer.tokens.begin(), answer.tokens.end() - 1);
    if (answer.cache_n > allowed)
        return ++stale_, cat("cache_n ", answer.cache_n, " but the slot holds only ", allowed, " of the prompt (a stale read)");
    if (answer.cache_n < allowed)
        return ++lost_, cat("cache_n ", answer.cache_n, " but the slot holds ", allowed, " of the prompt (lost reuse)");
    return "";
}

ServerCheckResult server_check(const ServerCheckConfig& c) {
    require(c.requests >= 1 && c.requests <= 100000, "server-check: --requests ", c.requests, ": from 1 to 100000");
    const Model model = Model::random(config_by_name(c.preset), c.seed);
    const int n_ctx = model.config().max_seq_len;
    std::filesystem::create_directories(c.work_dir);
    const std::string gguf = c.work_dir + "/model.gguf";
    save_gguf(model, gguf, Vocab::test);
    ServerCheckResult r;
    r.log = c.work_dir + "/llama-server.log";
    // One slot, F32 KV and flash attention off (the reference's numbers),
    // and no host-RAM cache: the slot is the only cache the model tracks.
    targets::llamaserver::ServerProcess server({c.server, gguf,
                                                {"-np", "1", "-c", std::to_string(n_ctx), "-t", "1", "--no-warmup", "-fa", "off",
                                                 "-ctk", "f32", "-ctv", "f32", "--cache-ram", "0"},
                                                r.log, 60});
    LogprobOracle logprobs(model, kTolerance);
    SlotCacheModel cache;
    RequestDraw draw(c.seed, model.config().vocab, n_ctx - kMargin);
    std::vector<int> last_prompt, last_answer;
    for (int k = 0; k < c.requests; ++k) {
        const auto [prompt, n_predict] = draw.next(last_prompt, last_answer);
        const nlohmann::json body = {{"prompt", prompt}, {"n_predict", n_predict}, {"n_probs", kTop}, {"temperature", 0},
                                     {"return_tokens", true}, {"cache_prompt", true}};
        targets::llamaserver::HttpAnswer got;
        try {
            got = targets::llamaserver::http_request(server.port(), "POST", "/completion", body.dump(), 60);
        } catch (const Error& e) {
            throw Error(cat("server-check: request ", k, " (prompt [", list(prompt), "]): ", e.what(), "; llama-server ",
                            server.running() ? "still runs" : "has ended", "; the last lines of its log (", r.log, "):\n",
                            server.log_tail(8)));
        }
        require(got.status == 200, "server-check: request ", k, " (prompt [", list(prompt), "]): status ", got.status, ": ",
                got.body.substr(0, 300));
        const ServerAnswer answer = parse_server_answer(got.body);
        for (const std::string& why : {logprobs.judge(prompt, answer), cache.judge(prompt, answer)})
            if (!why.empty()) r.failures.push_back(cat("request ", k, " (prompt of ", prompt.size(), " tokens [", list(prompt), "], n_predict ", n_predict, "): ", why));
        last_prompt = prompt, last_answer = answer.tokens;
        r.tokens += int(answer.tokens.size());
        ++r.requests;
    }
    server.stop();
    r.worst_logprob = logprobs.worst();
    r.stale = cache.stale(), r.lost = cache.lost(), r.reused = cache.reused(), r.allowed = cache.allowed();
    return r;
}

}  // namespace kvweld::sim
