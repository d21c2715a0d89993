// Runs of the server simulator: generated, replayed, shrunk, many seeds
// (sim/server/server_run.hpp).
#include "sim/server/server_run.hpp"

#include "sim/ddmin.hpp"
#include "sim/json_field.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

namespace kvweld::sim::server {

namespace {

ServerRunResult finish(ServerSim& sim, int steps, std::vector<ServerOp> ops, std::vector<nlohmann::json> observed) {
    ServerRunResult r{sim.config(), steps, std::move(ops), std::move(observed), sim.verdict(), sim.failure(),
                      sim.tally(), "", sim.log_path()};
    sim.end();
    return r;
}

// The first difference between what a trace recorded and what came, "" none.
std::string divergence(std::size_t op, const nlohmann::json& recorded, const nlohmann::json& got) {
    if (recorded.is_null() || recorded == got) return "";
    return cat("op ", op, ": the trace recorded ", recorded.dump(), ", the server now answered ", got.dump());
}

// A server that does not start: the run's server error at op 0, its log named.
ServerRunResult not_started(const ServerRunConfig& config, int steps, const Error& e) {
    ServerRunResult r;
    r.config = config, r.steps = steps, r.verdict = ServerVerdict::server_error;
    r.failure = ServerFailure{0, "server", e.what()};
    r.log = config.work_dir + "/llama-server.log";
    return r;
}

}  // namespace

ServerRunConfig server_config(const std::string& server, const std::string& preset, const std::string& arch,
                              std::uint64_t seed, const std::string& work_dir) {
    ServerRunConfig c;
    c.server = server, c.preset = preset, c.seed = seed, c.work_dir = work_dir;
    c.settings = ServerSettings::draw(seed, arch);
    return c;
}

ServerRunResult run_server_generated(const ServerRunConfig& config, int steps) {
    std::optional<ServerSim> started;
    try {
        started.emplace(config);
    } catch (const Error& e) {
        return not_started(config, steps, e);
    }
    ServerSim& sim = *started;
    ServerDraw draw(config.seed, config.settings, sim.model().config().vocab, sim.model().config().max_seq_len - 8);
    std::vector<ServerOp> ops;
    std::vector<nlohmann::json> observed;
    for (int i = 0; i < steps; ++i) {
        ops.push_back(draw.next());
        observed.emplace_back();
        const bool ok = sim.apply(ops.back(), ops.size() - 1, observed.back());
        if (!ok) break;
        draw.observe(ops.back(), observed.back());
    }
    return finish(sim, steps, std::move(ops), std::move(observed));
}

ServerRunResult run_server_ops(const ServerRunConfig& config, const std::vector<ServerOp>& ops,
                               const std::vector<nlohmann::json>& recorded, const std::function<void(ServerSim&)>& before) {
    std::optional<ServerSim> started;
    try {
        started.emplace(config);
    } catch (const Error& e) {
        ServerRunResult r = not_started(config, int(ops.size()), e);
        r.ops.assign(ops.begin(), ops.begin() + std::min<std::ptrdiff_t>(1, std::ptrdiff_t(ops.size())));
        return r;
    }
    ServerSim& sim = *started;
    if (before) before(sim);
    std::vector<ServerOp> ran;
    std::vector<nlohmann::json> observed;
    std::string diverged;
    for (const ServerOp& op : ops) {
        ran.push_back(op);
        observed.emplace_back();
        const bool ok = sim.apply(op, ran.size() - 1, observed.back());
        if (diverged.empty() && ran.size() <= recorded.size())
            diverged = divergence(ran.size() - 1, recorded[ran.size() - 1], observed.back());
        if (!ok) break;
    }
    ServerRunResult r = finish(sim, int(ops.size()), std::move(ran), std::move(observed));
    r.diverged = diverged;
    return r;
}

// ---- traces

std::string server_trace_text(const ServerRunResult& r) {
    const nlohmann::json header = {{"format", kServerTraceFormat}, {"version", kServerTraceVersion},
                                   {"seed", r.config.seed},        {"preset", r.config.preset},
                                   {"settings", r.config.settings.to_json()}, {"steps", r.steps}};
    std::string out = header.dump() + "\n";
    for (std::size_t i = 0; i < r.ops.size(); ++i) {
        nlohmann::json line;
        to_json(line, r.ops[i]);
        if (i < r.observed.size() && !r.observed[i].is_null()) line["got"] = r.observed[i];
        out += line.dump() + "\n";
    }
    return out;
}

bool is_server_trace(const std::string& text) {
    const nlohmann::json header = nlohmann::json::parse(text.substr(0, text.find('\n')), nullptr, false);
    return header.is_object() && header.value("format", "") == kServerTraceFormat;
}

ServerTrace parse_server_trace(const std::string& text, const std::string& origin) {
    std::istringstream in(text);
    std::string line;
    int number = 0;
    ServerTrace t;
    while (std::getline(in, line)) {
        ++number;
        if (line.empty()) continue;
        try {
            const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
            require(!j.is_discarded(), "not JSON");
            if (number == 1) {
                require(json_field<std::string>(j, "format") == kServerTraceFormat, "not a ", kServerTraceFormat);
                const int version = json_field<int>(j, "version");
                require(version == kServerTraceVersion, "version ", version, ", this build reads version ", kServerTraceVersion);
                t.config.seed = json_field<std::uint64_t>(j, "seed");
                t.config.preset = json_field<std::string>(j, "preset");
                require(j.contains("settings"), "missing field 'settings'");
                t.config.settings = ServerSettings::from_json(j.at("settings"));
                t.steps = json_field<int>(j, "steps");
                continue;
            }
            t.ops.push_back(server_op_from_json(j));
            t.observed.push_back(j.contains("got") ? j.at("got") : nlohmann::json());
        } catch (const Error& e) {
            throw Error(cat(origin, ":", number, ": ", e.what()));
        }
    }
    require(number >= 1, origin, ": empty (a server trace starts with its header line)");
    return t;
}

// ---- shrinking

namespace {

// Simpler forms of one op, simplest first: greedy, whole (not streamed),
// one completion, one token; an embedding request with an input fewer.
std::vector<ServerOp> simpler(const ServerOp& op) {
    std::vector<ServerOp> out;
    auto each_completion = [&](auto&& change) {
        ServerOp x = op;
        bool changed = false;
        std::visit([&](auto& a) {
            using T = std::decay_t<decltype(a)>;
            if constexpr (std::is_same_v<T, Complete>) changed = change(a.request);
            else if constexpr (std::is_same_v<T, Burst>)
                for (Completion& c : a.requests) changed |= change(c);
            else if constexpr (std::is_same_v<T, During>) {
                // What went out during the stream; the stream keeps its form (streamed, its moment's completion and token).
                if (auto* c = std::get_if<Completion>(&a.then)) changed = change(*c);
            } else static_assert(std::is_same_v<T, Slot> || std::is_same_v<T, Embed> || std::is_same_v<T, Lora>,
                                 "every server op kind is simplified");
        }, x.args);
        if (changed) out.push_back(std::move(x));
    };
    each_completion([](Completion& c) {
        const bool sampled = c.temperature != 0;
        c.temperature = 0, c.seed = 0;
        return sampled;
    });
    each_completion([](Completion& c) {
        const bool streamed = c.stream;
        c.stream = false, c.cancel_after = 0;
        return streamed;
    });
    each_completion([](Completion& c) { return std::exchange(c.n_cmpl, 1) != 1; });
    each_completion([](Completion& c) { return std::exchange(c.n_predict, 1) != 1; });
    if (const auto* e = std::get_if<Embed>(&op.args); e && e->inputs.size() > 1)
        for (std::size_t i = 0; i < e->inputs.size(); ++i) {
            Embed fewer = *e;
            fewer.inputs.erase(fewer.inputs.begin() + std::ptrdiff_t(i));
            out.push_back({fewer});
        }
    return out;
}

}  // namespace

// Delta debugging over the ops, then simpler settings, then each op made
// simpler, then delta debugging again; a candidate is kept when it ends
// with the same verdict by the same oracle, and `same` holds.
ServerShrinkResult shrink_server(const ServerRunConfig& config, const std::vector<ServerOp>& ops, int max_runs,
                                 const std::function<void(int)>& progress,
                                 const std::function<bool(const ServerRunResult&)>& same) {
    ServerShrinkResult out;
    out.before = ops.size();
    out.result = run_server_ops(config, ops);
    out.runs = 1;
    require(out.result.verdict != ServerVerdict::pass, "shrink: the trace passes (", ops.size(), " ops): nothing to shrink");
    const ServerVerdict verdict = out.result.verdict;
    const std::string oracle = out.result.failure->oracle;
    ServerRunConfig best_config = config;
    std::vector<ServerOp> best = out.result.ops;
    const auto spent = [&] { return out.runs >= max_runs; };
    auto try_run = [&](const ServerRunConfig& c, const std::vector<ServerOp>& candidate) {
        if (spent()) return false;
        ServerRunResult r = run_server_ops(c, candidate);
        ++out.runs;
        if (progress) progress(out.runs);
        if (r.verdict != verdict || r.failure->oracle != oracle || (same && !same(r))) return false;
        best_config = c, best = r.ops;
        out.result = std::move(r);
        return true;
    };
    auto try_keep = [&](const std::vector<ServerOp>& candidate) { return !candidate.empty() && try_run(best_config, candidate); };
    ddmin(best, try_keep, spent);
    for (const ServerSettings& s : best_config.settings.simpler()) {
        ServerRunConfig c = best_config;
        c.settings = s;
        try_run(c, best);
    }
    for (std::size_t i = 0; i < best.size(); ++i)
        for (const ServerOp& op : simpler(best[i])) {
            std::vector<ServerOp> candidate = best;
            candidate[i] = op;
            if (try_run(best_config, candidate)) break;
        }
    ddmin(best, try_keep, spent);
    return out;
}

// ---- reports

std::string server_report(const ServerRunResult& r) {
    std::string out = cat("llama-server ", r.config.server, " (", r.config.settings.describe(), "), seed ", r.config.seed,
                          ", a random ", r.config.preset, " model (test vocabulary): ", r.ops.size(), " ops\n");
    for (const std::string& line : r.tally.lines()) out += cat("  ", line, "\n");
    if (!r.diverged.empty()) out += cat("  the server chose otherwise than the trace recorded, from ", r.diverged, "\n");
    out += cat("verdict: ", to_string(r.verdict));
    if (r.failure) out += cat(" at op ", r.failure->op, " (", r.failure->oracle, "): ", r.failure->message);
    return out + "\n";
}

}  // namespace kvweld::sim::server
