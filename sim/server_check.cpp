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
#include <array>
#include <cmath>
#include <filesystem>
#include <optional>

namespace kvweld::sim {

namespace {

constexpr int kTop = 4;             // n_probs asked
constexpr double kTolerance = 1e-4;  // |logprob - reference|, as the GGUF test's logits
constexpr int kMargin = 8;           // positions left free at the end of the slot's context

std::string list(const std::vector<int>& v) {
    std::string out;
    for (int t : v) out += cat(out.empty() ? "" : ",", t);
    return out;
}

// The seed's requests, each pinned to a slot: a multi-turn chat (the
// slot's last prompt, its answer, a few new tokens), an agent's edit (the
// slot's last prompt with a few tokens cut from its middle, a new tail), a
// few-shot prompt (a prefix every such prompt shares, a new tail) or a
// fresh one; 1 to 6 tokens generated.
class RequestDraw {
public:
    RequestDraw(std::uint64_t seed, int vocab, int max_len, int slots)
        : rng_(seed ^ 0x5e5e5e5eULL), vocab_(vocab), max_len_(max_len), last_(std::size_t(slots)) {
        shared_ = tokens(16);
    }
    struct Request {
        int slot, n_predict;
        std::vector<int> prompt;
        std::optional<SlotAction> action = {};  // a slot action in place of a completion
        int file = 0;
    };
    Request next() {
        Request r{int(rng_.below(last_.size())), int(rng_.range(1, 6)), {}};
        if (rng_.chance(0.2)) {
            r.file = int(rng_.below(kFiles));
            r.action = std::array{SlotAction::save, SlotAction::restore, SlotAction::erase}[rng_.below(3)];
            if (r.action != SlotAction::restore || saved_[std::size_t(r.file)]) return r;
            r.action.reset();  // nothing saved there yet: a completion instead
        }
        const auto& [prompt, answer] = last_[std::size_t(r.slot)];
        switch (rng_.below(4)) {
            case 0:
                r.prompt = prompt;
                r.prompt.insert(r.prompt.end(), answer.begin(), answer.end());
                append(r.prompt, int(rng_.range(1, 4)));
                break;
            case 1:
                r.prompt = prompt;
                if (r.prompt.size() > 8) {
                    const auto at = r.prompt.begin() + std::ptrdiff_t(rng_.range(2, std::int64_t(r.prompt.size()) - 4));
                    r.prompt.erase(at, at + std::ptrdiff_t(rng_.range(1, 3)));
                }
                append(r.prompt, int(rng_.range(1, 4)));
                break;
            case 2: r.prompt = shared_, append(r.prompt, int(rng_.range(2, 8))); break;
            default: r.prompt = tokens(int(rng_.range(4, 16))); break;
        }
        // A conversation that no longer fits starts again.
        if (int(r.prompt.size()) + r.n_predict > max_len_) r.prompt = tokens(int(rng_.range(4, 16)));
        return r;
    }
    void answered(const Request& r, const std::vector<int>& tokens) { last_[std::size_t(r.slot)] = {r.prompt, tokens}; }
    // A slot action done: the conversation moves with the state.
    void acted(const Request& r) {
        auto& slot = last_[std::size_t(r.slot)];
        switch (*r.action) {
            case SlotAction::save: saved_[std::size_t(r.file)] = slot; break;
            case SlotAction::restore: slot = *saved_[std::size_t(r.file)]; break;
            case SlotAction::erase: slot = {}; break;
        }
    }
    static constexpr int kFiles = 3;

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
    std::vector<std::pair<std::vector<int>, std::vector<int>>> last_;  // per slot: its last prompt and answer
    std::array<std::optional<std::pair<std::vector<int>, std::vector<int>>>, kFiles> saved_;  // per file
};

// The server's settings of a seed, drawn apart from its requests.
struct ServerSettings {
    int slots, cache_reuse;
    bool unified;
    explicit ServerSettings(std::uint64_t seed) {
        Rng rng(seed ^ 0x5e77165ULL);
        slots = int(rng.range(1, 3));
        unified = rng.chance(0.5);
        cache_reuse = std::array<int, 3>{0, 2, 4}[rng.below(3)];
    }
    std::string flags() const {
        return cat("-np ", slots, unified ? " --kv-unified" : " --no-kv-unified", " --cache-reuse ", cache_reuse);
    }
};

// A POST to the server; a failed exchange is an Error naming the request
// and quoting the server's log.
targets::llamaserver::HttpAnswer ask(targets::llamaserver::ServerProcess& server, const std::string& path,
                                     const std::string& body, const std::string& what, const std::string& log) {
    try {
        return targets::llamaserver::http_request(server.port(), "POST", path, body, 60);
    } catch (const Error& e) {
        throw Error(cat("server-check: ", what, ": ", e.what(), "; llama-server ", server.running() ? "still runs" : "has ended",
                        "; the last lines of its log (", log, "):\n", server.log_tail(8)));
    }
}

}  // namespace

ServerAnswer parse_server_answer(const std::string& text) {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    require(j.is_object() && j.contains("tokens") && j.contains("completion_probabilities") && j.contains("timings"),
            "server answer: no tokens, completion_probabilities or timings in '", text.substr(0, 200), "'");
    ServerAnswer a;
    a.tokens = j.at("tokens").get<std::vector<int>>();
    a.cache_n = j.at("timings").at("cache_n").get<int>();
    if (j.contains("id_slot")) a.slot = j.at("id_slot").get<int>();
    for (const nlohmann::json& step : j.at("completion_probabilities")) {
        a.top.emplace_back();
        for (const nlohmann::json& p : step.at("top_logprobs")) a.top.back().emplace_back(p.at("id").get<int>(), p.at("logprob").get<double>());
    }
    require(a.top.size() == a.tokens.size(), "server answer: ", a.tokens.size(), " tokens but ", a.top.size(),
            " completion_probabilities");
    return a;
}

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

LogprobOracle::LogprobOracle(const Model& model, double tolerance, int slots, int cache_reuse)
    : model_(model), tolerance_(tolerance), cache_reuse_(cache_reuse),
      slots_(std::size_t(slots), Slot{{}, ReferenceKv(model.config())}) {}

void LogprobOracle::on_slot_action(SlotAction action, int slot, int file) {
    if (files_.size() <= std::size_t(file)) files_.resize(std::size_t(file) + 1, Slot{{}, ReferenceKv(model_.config())});
    Slot& s = slots_.at(std::size_t(slot));
    switch (action) {
        case SlotAction::save: files_[std::size_t(file)] = s; break;
        case SlotAction::restore: s = files_[std::size_t(file)]; break;
        case SlotAction::erase: s.held.clear(); break;
    }
}

std::string LogprobOracle::judge(int slot, const std::vector<int>& prompt, const ServerAnswer& answer) {
    Slot& s = slots_.at(std::size_t(slot));
    const ReusePlan plan = plan_reuse(s.held, prompt, cache_reuse_);
    // Each chunk as the server moves it (positions [to, from) dropped, the
    // chunk moved down), with the rows after it moved too: the reference's
    // shift keeps positions in step, and rows past n_past are written anew.
    int len = int(s.held.size()), removed = 0;
    for (const ReusePlan::Chunk& c : plan.chunks) {
        const int p1 = c.from - removed;
        s.kv.shift(model_.config(), c.to, p1, len);
        len -= p1 - c.to, removed += p1 - c.to;
    }
    std::vector<int> held = prompt;
    held.insert(held.end(), answer.tokens.begin(), answer.tokens.end());
    std::string wrong;
    for (int pos = plan.n_past; pos + 1 < int(held.size()); ++pos) {
        const std::vector<double> lp = log_probs(reference_forward(model_, s.kv, held[std::size_t(pos)], pos));
        const int i = pos - int(prompt.size()) + 1;  // the generated token this position predicts
        if (i < 0 || !wrong.empty()) continue;
        const int token = answer.tokens[std::size_t(i)];
        const double best = *std::max_element(lp.begin(), lp.end());
        ++judged_;
        if (lp[std::size_t(token)] < best - tolerance_)
            wrong = cat("generated token ", i, " is ", token, " (reference logprob ", lp[std::size_t(token)],
                        "), but the reference's most likely has ", best);
        for (const auto& [id, logprob] : answer.top[std::size_t(i)]) {
            const double d = std::fabs(logprob - lp[std::size_t(id)]);
            worst_ = std::max(worst_, d);
            if (!(d <= tolerance_) && wrong.empty())
                wrong = cat("generated token ", i, ": token ", id, " logprob ", logprob, ", reference ", lp[std::size_t(id)],
                            " (|difference| ", d, " > ", tolerance_, ")");
        }
    }
    // The slot holds the prompt and every generated token but the last (never decoded).
    if (!answer.tokens.empty()) held.pop_back();
    s.held = std::move(held);
    return wrong;
}

std::string SlotCacheModel::on_slot_action(SlotAction action, int slot, int file, int n) {
    if (files_.size() <= std::size_t(file)) files_.resize(std::size_t(file) + 1);
    std::vector<int>& held = held_.at(std::size_t(slot));
    std::vector<int>& saved = files_[std::size_t(file)];
    const std::vector<int>& moved = action == SlotAction::restore ? saved : held;
    const std::string wrong = n == int(moved.size()) ? "" : cat("the server's count is ", n, " tokens, but ",
        action == SlotAction::restore ? cat("file ", file, " holds ") : cat("slot ", slot, " held "), moved.size());
    switch (action) {
        case SlotAction::save: saved = held; break;
        case SlotAction::restore: held = saved; break;
        case SlotAction::erase: held.clear(); break;
    }
    return wrong;
}

std::string SlotCacheModel::judge(int slot, const std::vector<int>& prompt, const ServerAnswer& answer) {
    std::vector<int>& held = held_.at(std::size_t(slot));
    const int allowed = plan_reuse(held, prompt, cache_reuse_).n_past;
    reused_ += answer.cache_n;
    allowed_ += allowed;
    // The slot now holds the prompt and every generated token but the last (never decoded).
    held = prompt;
    if (!answer.tokens.empty()) held.insert(held.end(), answer.tokens.begin(), answer.tokens.end() - 1);
    if (answer.cache_n > allowed)
        return ++stale_, cat("cache_n ", answer.cache_n, " but slot ", slot, " holds only ", allowed, " of the prompt (a stale read)");
    if (answer.cache_n < allowed)
        return ++lost_, cat("cache_n ", answer.cache_n, " but slot ", slot, " holds ", allowed, " of the prompt (lost reuse)");
    return "";
}

std::string server_check_settings(std::uint64_t seed) { return ServerSettings(seed).flags(); }

ServerCheckResult server_check(const ServerCheckConfig& c) {
    require(c.requests >= 1 && c.requests <= 100000, "server-check: --requests ", c.requests, ": from 1 to 100000");
    const Model model = Model::random(config_by_name(c.preset), c.seed);
    const int n_ctx = model.config().max_seq_len;
    std::filesystem::create_directories(c.work_dir);
    const std::string gguf = c.work_dir + "/model.gguf";
    save_gguf(model, gguf, Vocab::test);
    ServerCheckResult r;
    r.log = c.work_dir + "/llama-server.log";
    // F32 KV and flash attention off (the reference's numbers), and no
    // host-RAM cache: the slots are the only caches the model tracks.
    const ServerSettings settings(c.seed);
    r.settings = settings.flags();
    std::filesystem::create_directories(c.work_dir + "/slots");
    std::vector<std::string> args = {"-c", std::to_string(n_ctx * settings.slots), "-t", "1", "--no-warmup", "-fa", "off",
                                     "-ctk", "f32", "-ctv", "f32", "--cache-ram", "0", "--slot-save-path", c.work_dir + "/slots/"};
    for (std::size_t at = 0, next; at < r.settings.size(); at = next + 1) {
        next = std::min(r.settings.find(' ', at), r.settings.size());
        args.push_back(r.settings.substr(at, next - at));
    }
    targets::llamaserver::ServerProcess server({c.server, gguf, args, r.log, 60});
    LogprobOracle logprobs(model, kTolerance, settings.slots, settings.cache_reuse);
    SlotCacheModel cache(settings.slots, settings.cache_reuse);
    RequestDraw draw(c.seed, model.config().vocab, n_ctx - kMargin, settings.slots);
    for (int k = 0; k < c.requests; ++k) {
        const RequestDraw::Request q = draw.next();
        if (q.action) {
            constexpr const char* kNames[] = {"save", "restore", "erase"};
            const char* name = kNames[int(*q.action)];
            const std::string what = cat("request ", k, " (slot ", q.slot, " ", name, ", file ", q.file, ")");
            const std::string file = cat("{\"filename\": \"slot-", q.file, ".bin\"}");
            const targets::llamaserver::HttpAnswer got = ask(server, cat("/slots/", q.slot, "?action=", name),
                                                            *q.action == SlotAction::erase ? "{}" : file, what, r.log);
            require(got.status == 200, "server-check: ", what, ": status ", got.status, ": ", got.body.substr(0, 300));
            const nlohmann::json j = nlohmann::json::parse(got.body, nullptr, false);
            const std::string field = cat("n_", *q.action == SlotAction::save ? "saved" : *q.action == SlotAction::restore ? "restored" : "erased");
            require(j.is_object() && j.contains(field), "server-check: ", what, ": no ", field, " in '", got.body.substr(0, 200), "'");
            const std::string why = cache.on_slot_action(*q.action, q.slot, q.file, j.at(field).get<int>());
            if (!why.empty()) r.failures.push_back(cat(what, ": ", why));
            logprobs.on_slot_action(*q.action, q.slot, q.file);
            draw.acted(q);
            ++r.slot_actions, ++r.requests;
            continue;
        }
        const nlohmann::json body = {{"prompt", q.prompt}, {"n_predict", q.n_predict}, {"n_probs", kTop}, {"temperature", 0},
                                     {"return_tokens", true}, {"cache_prompt", true}, {"id_slot", q.slot}};
        const std::string what = cat("request ", k, " (slot ", q.slot, ", prompt of ", q.prompt.size(), " tokens [",
                                     list(q.prompt), "], n_predict ", q.n_predict, ")");
        const targets::llamaserver::HttpAnswer got = ask(server, "/completion", body.dump(), what, r.log);
        require(got.status == 200, "server-check: ", what, ": status ", got.status, ": ", got.body.substr(0, 300));
        const ServerAnswer answer = parse_server_answer(got.body);
        std::vector<std::string> wrong = {logprobs.judge(q.slot, q.prompt, answer), cache.judge(q.slot, q.prompt, answer)};
        if (answer.slot != q.slot) wrong.push_back(cat("served by slot ", answer.slot, ", not the one asked for"));
        for (const std::string& why : wrong)
            if (!why.empty()) r.failures.push_back(cat(what, ": ", why));
        draw.answered(q, answer.tokens);
        r.tokens += int(answer.tokens.size());
        ++r.requests;
    }
    server.stop();
    r.worst_logprob = logprobs.worst();
    r.stale = cache.stale(), r.lost = cache.lost(), r.reused = cache.reused(), r.allowed = cache.allowed();
    return r;
}

}  // namespace kvweld::sim
