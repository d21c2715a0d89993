// The server's reuse under serving traffic (sim/server/server_traffic.hpp).
#include "sim/server/server_traffic.hpp"

#include "engine/reference.hpp"
#include "sim/server/server_oracles.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

namespace kvweld::sim::server {

std::string_view to_string(Workload w) {
    switch (w) {
        case Workload::chat: return "chat";
        case Workload::few_shot: return "few-shot";
        case Workload::agent: return "agent";
    }
    return "?";
}

// The study's grid: completions on F32 KV, every slot's context the model's,
// no adapters, draft model or context shift; the RAM cache off or at the
// server's default.
std::vector<ServerSettings> traffic_settings() {
    const auto at = [](int slots, bool unified, int cache_reuse, int cache_ram) {
        return ServerSettings{.slots = slots, .unified = unified, .cache_reuse = cache_reuse, .pooling = "", .ctx_extra = 0,
                              .loras = 0, .cache_ram = cache_ram, .idle_slots = cache_ram != 0, .draft = 0,
                              .context_shift = false, .kv_type = KvType::f32, .arch = "llama", .window = 8,
                              .swa_full = false, .ctx_checkpoints = 32, .checkpoint_min_step = 8192, .ngram = false};
    };
    std::vector<ServerSettings> out;
    for (int slots : {2, 3})
        for (bool unified : {false, true})
            for (int reuse : {0, 4}) out.push_back(at(slots, unified, reuse, 0));
    // The server's default RAM cache (8192 MiB, idle slots saved) on two slots, with and without unified KV.
    for (bool unified : {false, true}) out.push_back(at(2, unified, 0, 8192));
    return out;
}

namespace {

// The greedy answer to `prompt`: the reference's most likely tokens, which
// the logprob oracle holds the server's to.
std::vector<int> greedy(const Model& model, const std::vector<int>& prompt, int n) {
    ReferenceKv kv(model.config());
    std::vector<int> held = prompt, out;
    for (std::size_t pos = 0; int(out.size()) < n; ++pos) {
        const std::vector<float> logits = reference_forward(model, kv, held[pos], int(pos));
        if (pos + 1 < held.size()) continue;
        out.push_back(int(std::max_element(logits.begin(), logits.end()) - logits.begin()));
        held.push_back(out.back());
    }
    return out;
}

}  // namespace

// Each request is the next turn of one of `clients` histories: a chat's
// history holds its answers (the greedy ones, the server's too), an agent's
// is cut and extended, a few-shot client's is the shared prefix and a new
// tail every time.
std::vector<ServerOp> traffic_ops(Workload w, std::uint64_t seed, int requests, int clients, const Model& model) {
    const int vocab = model.config().vocab, max_len = model.config().max_seq_len - 8;
    Rng rng(seed ^ 0x7aff1cULL ^ std::uint64_t(w));
    auto tokens = [&](int n) {
        std::vector<int> v;
        for (int i = 0; i < n; ++i) v.push_back(int(rng.below(std::uint64_t(vocab))));
        return v;
    };
    const std::vector<int> shared = tokens(24);
    std::vector<std::vector<int>> history(static_cast<std::size_t>(clients));
    std::vector<ServerOp> ops;
    for (int k = 0; k < requests; ++k) {
        std::vector<int>& h = history[std::size_t(rng.below(std::uint64_t(clients)))];
        Completion c;
        c.n_predict = int(rng.range(2, 4));
        switch (w) {
            case Workload::chat: break;
            case Workload::few_shot: h = shared; break;
            case Workload::agent:
                if (h.size() > 8) {
                    const auto at = h.begin() + std::ptrdiff_t(rng.range(std::int64_t(h.size()) / 2, std::int64_t(h.size()) - 2));
                    h.erase(at, at + 1);
                }
                break;
        }
        const std::vector<int> tail = tokens(int(rng.range(3, 8)));
        h.insert(h.end(), tail.begin(), tail.end());
        if (int(h.size()) + c.n_predict > max_len) h = w == Workload::few_shot ? shared : tokens(8);
        c.prompt = h;
        ops.push_back({Complete{c}});
        if (w == Workload::chat) {
            const std::vector<int> answer = greedy(model, h, c.n_predict);
            h.insert(h.end(), answer.begin(), answer.end());
        }
    }
    return ops;
}

TrafficRow run_traffic(const ServerTrafficOptions& o, const ServerSettings& s, Workload w) {
    ServerRunConfig c;
    c.server = o.server, c.preset = o.preset, c.seed = o.seed, c.settings = s, c.request_timeout_s = o.request_timeout_s;
    c.work_dir = cat(o.work_dir, "/", to_string(w), "-np", s.slots, s.unified ? "-unified" : "", "-reuse", s.cache_reuse,
                     s.cache_ram ? cat("-ram", s.cache_ram, s.idle_slots ? "-idle" : "") : "");
    const Model model = Model::random(config_by_name(o.preset), o.seed);
    const std::vector<ServerOp> ops = traffic_ops(w, o.seed, o.requests, 2 * s.slots, model);
    TrafficRow row;
    row.settings = s, row.workload = w, row.requests = int(ops.size());
    // The cache model beside the run: per request, what the chosen slot and the best slot allowed.
    SlotCacheModel cache(s, model.config().max_seq_len);
    std::vector<std::vector<int>> every_state;  // each slot state the run left, for the unbounded cache
    const ServerRunResult r = run_server_ops(c, ops);
    for (std::size_t i = 0; i < r.ops.size() && i < r.observed.size() && !r.observed[i].is_null(); ++i) {
        const Answered one = answered(r.ops[i], r.observed[i]).at(0);
        const Completion& q = one.request;
        const ServerAnswer& a = one.answers.at(0);
        const int slot = a.slot;
        int best = 0;
        for (int k = 0; k < s.slots; ++k) best = std::max(best, cache.allowed(q, k).second);
        row.prompt_tokens += long(q.prompt.size()), row.reused += a.cache_n;
        row.chosen_allowed += cache.allowed(q, slot).second, row.ideal += best;
        int any = best;
        for (const std::vector<int>& held : every_state) any = std::max(any, plan_reuse(held, q.prompt, s.cache_reuse).n_past);
        row.unbounded += any;
        cache.on_completion(q, one.answers);
        every_state.push_back(q.prompt);
        every_state.back().insert(every_state.back().end(), a.tokens.begin(), a.tokens.end() - (a.tokens.empty() ? 0 : 1));
    }
    row.verdict = r.verdict;
    if (r.failure) row.failure = cat("op ", r.failure->op, " (", r.failure->oracle, "): ", r.failure->message.substr(0, 200));
    return row;
}

std::string traffic_table(const std::vector<TrafficRow>& rows) {
    std::string out = "setting                                                                     workload  requests  prompt  reused  hit rate  chosen slot  best slot  any state\n";
    for (const TrafficRow& r : rows) {
        char line[256];
        std::snprintf(line, sizeof line, "%-75s %-9s %8d %7ld %7ld %8.3f %12.3f %10.3f %10.3f%s\n", r.settings.describe().c_str(),
                      std::string(to_string(r.workload)).c_str(), r.requests, r.prompt_tokens, r.reused, r.rate(r.reused),
                      r.rate(r.chosen_allowed), r.rate(r.ideal), r.rate(r.unbounded), r.failure.empty() ? "" : cat("  FAIL ", r.failure).c_str());
        out += line;
    }
    return out;
}

void write_traffic_csv(const std::string& path, const std::vector<TrafficRow>& rows) {
    std::ofstream f(path);
    require(f.good(), "--csv ", path, ": cannot write");
    f << "slots,unified,cache_reuse,cache_ram,idle_slots,workload,requests,prompt_tokens,reused,chosen_allowed,ideal,unbounded,verdict\n";
    for (const TrafficRow& r : rows)
        f << r.settings.slots << ',' << r.settings.unified << ',' << r.settings.cache_reuse << ',' << r.settings.cache_ram << ','
          << r.settings.idle_slots << ',' << to_string(r.workload) << ','
          << r.requests << ',' << r.prompt_tokens << ',' << r.reused << ',' << r.chosen_allowed << ',' << r.ideal << ','
          << r.unbounded << ',' << to_string(r.verdict) << '\n';
}

void write_traffic_plot(const std::string& png, const std::vector<TrafficRow>& rows) {
    const std::string script = png + ".gp";
    std::ofstream gp(script, std::ios::trunc);
    require(gp.good(), "--plot ", png, ": cannot write ", script);
    const std::vector<ServerSettings> settings = traffic_settings();
    for (Workload w : kWorkloads) {
        gp << "$" << to_string(w).substr(0, 3) << " << EOD\n";
        int x = 0;
        for (const TrafficRow& r : rows)
            if (r.workload == w)
                gp << x++ << " \"np" << r.settings.slots << (r.settings.unified ? " unified" : "") << " reuse " << r.settings.cache_reuse
                   << (r.settings.cache_ram ? " ram" : "")
                   << "\" " << r.rate(r.reused) << ' ' << r.rate(r.ideal) << ' ' << r.rate(r.unbounded) << '\n';
        gp << "EOD\n";
    }
    gp << "set terminal pngcairo size 1500,520 noenhanced\nset output '" << png << "'\nset key bottom right inside\nset grid\n"
       << "set yrange [0:1]\nset xtics rotate by 30 right font ',9'\nset multiplot layout 1,3 title 'llama-server: prompt tokens "
          "reused (hit rate) against the most the best slot held (ideal) and any earlier slot state (unbounded cache), per setting'\n";
    for (Workload w : kWorkloads)
        gp << "set title '" << to_string(w) << "'\nset ylabel 'share of prompt tokens'\nplot $" << to_string(w).substr(0, 3)
           << " using 1:3:xtic(2) with linespoints lw 2 title 'hit rate', '' using 1:4 with lines dt 2 lw 2 title 'ideal', "
              "'' using 1:5 with lines dt 3 lw 2 title 'unbounded cache'\n";
    gp << "unset multiplot\n";
    gp.close();
    const int rc = std::system(cat("gnuplot '", script, "'").c_str());
    require(rc == 0, "gnuplot failed on ", script, " (exit ", rc, "); is gnuplot installed? (scripts/setup)");
}

}  // namespace kvweld::sim::server
