// `kvweld traffic`: the options of the reuse study (sim/traffic_study.hpp),
// and its steps in order, printing as each ends.
#include "cli/commands.hpp"

#include "sim/server/server_traffic.hpp"
#include "sim/traffic_study.hpp"
#include "targets/registry.hpp"

#include <algorithm>
#include <filesystem>
#include <unistd.h>
#include <cstdio>

namespace kvweld::cli {

using namespace kvweld::sim;

namespace {

struct TrafficArgs {
    TrafficParams params;
    TrafficStudyArgs engine;
    std::string server;    // --engine llama-server: its binary
    int requests = 60;     // --engine llama-server: per workload and setting
    std::string adapter_switch = "set";
    std::string mode = "churn";
};

// What the study runs, in one line (and the adapters', when there are any).
void print_header(const TrafficParams& p, const TrafficStudyArgs& a, const std::string& name) {
    std::printf("traffic (%s) on engine %s: seed %llu, %d ticks, %d sequences, model %s, arrivals %.3g/tick, prompt "
                "mean %d (chunks of %d), output mean %d, spec k=%d accept %.2f",
                std::string(to_string(p.mode)).c_str(), name.c_str(), (unsigned long long)p.seed, p.ticks, p.slots,
                p.model.c_str(), p.arrival_rate, p.prompt_mean, a.chunk, p.output_mean, p.spec_k, p.accept);
    if (p.mode == TrafficMode::steady)
        std::printf(", %d tokens per step (decodes first); lengths log-normal, outputs also ending at a stop token; "
                    "no preemption but for memory, no offload, no reload", p.token_budget);
    else
        std::printf(", preempt %.3g, offload %.3g (where the engine can swap layers) and reload %.3g per tick",
                    p.preempt_rate, p.offload_rate, p.reload_rate);
    std::printf(". Same: the share of calls with the last call's batch shape. Decode s: wall time in the engine's "
                "decode calls, best of %d.\n", a.repeat);
    if (p.adapters)
        std::printf("per-request LoRA: %d adapters and the base model, one call per adapter in use, switched by %s\n",
                    p.adapters,
                    p.adapter_switch == AdapterSwitch::set ? "setting the one adapter (none for the base)"
                                                           : "the scales of one set of every adapter (1 for the call's, 0 for the rest)");
}

// --engine llama-server: the server's hit rate against the cache model's
// ideal, per setting and workload (sim/server/server_traffic.hpp).
int run_server_study(const TrafficArgs& a) {
    namespace srv = kvweld::sim::server;
    srv::ServerTrafficOptions o;
    o.server = a.server.empty() ? targets::server_binary(a.engine.engine) : a.server;
    o.preset = a.params.model, o.seed = a.params.seed, o.requests = a.requests;
    o.work_dir = (std::filesystem::temp_directory_path() / cat("kvweld-server-traffic-", ::getpid())).string();
    std::printf("traffic on llama-server %s: seed %llu, %d requests per workload and setting, unpinned (the server "
                "chooses each slot), a random %s model; clients: twice the slots. Hit rate: prompt tokens reused "
                "(timings.cache_n) / prompt tokens; chosen slot allowed: the most the slot the server chose held; "
                "ideal: the most the best slot held\n",
                o.server.c_str(), (unsigned long long)o.seed, o.requests, o.preset.c_str());
    std::fflush(stdout);
    std::vector<srv::TrafficRow> rows;
    for (const srv::ServerSettings& s : srv::traffic_settings())
        for (srv::Workload w : srv::kWorkloads) rows.push_back(srv::run_traffic(o, s, w));
    std::printf("%s", srv::traffic_table(rows).c_str());
    if (!a.engine.csv.empty()) srv::write_traffic_csv(a.engine.csv, rows);
    if (!a.engine.plot.empty()) srv::write_traffic_plot(a.engine.plot, rows), std::printf("plot: %s\n", a.engine.plot.c_str());
    const bool ok = std::all_of(rows.begin(), rows.end(), [](const srv::TrafficRow& r) { return r.failure.empty(); });
    if (ok) std::filesystem::remove_all(o.work_dir);
    std::printf("traffic verdict: %s%s\n", ok ? "PASS" : "FAIL", ok ? "" : cat(" (the runs' files: ", o.work_dir, ")").c_str());
    return ok ? 0 : 1;
}

int run_study(const TrafficParams& p, const TrafficStudyArgs& a) {
    const EngineChoice base{a.engine, a.params, ""};
    require_engine(base.engine);
    const std::string name = engine_display_name(base.engine);
    print_header(p, a, name);
    std::fflush(stdout);
    const BuildCosts costs = measure_build_costs(p, base);
    for (const auto& [setting, secs] : costs)
        if (!std::isnan(secs))
            std::printf("one graph build (%s), measured apart: %.1f us\n", setting.c_str(), secs * 1e6);
    std::vector<StudyRow> rows = run_rows(p, base, a.chunk, a.repeat, "base", costs);
    print_table(rows);
    for (const StudyRow& r : rows)
        if (r.with.result.pool.paged)
            std::printf("pool (%s): %s\n", r.setting.label().c_str(), describe(r.with.result.pool).c_str());
    print_shapes(rows.front());
    bool ok = std::all_of(rows.begin(), rows.end(), [](const StudyRow& r) { return r.ok(); });
    if (a.sweep) {
        sweep_rows(p, base, a.chunk, a.repeat, costs, rows);
        ok = ok && std::all_of(rows.begin(), rows.end(), [](const StudyRow& r) { return r.ok(); });
        std::printf("sweep: %s per setting: %s\n", sweep_description(p.mode).c_str(),
                    ok ? "no oracle failed" : "FAILURES, see the CSV");
    }
    if (!a.csv.empty()) write_csv(a.csv, rows);
    if (!a.json.empty()) write_json(a.json, rows_json(rows, costs, ok));
    if (!a.plot.empty()) {
        require(a.sweep, "--plot needs --sweep (it plots the sweep)");
        write_sweep_plot(a.plot, rows, name, p.mode);
        std::printf("plot: %s\n", a.plot.c_str());
    }
    std::printf("traffic verdict: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

}  // namespace

void add_traffic_command(CLI::App& app, std::function<int()>& action) {
    auto a = std::make_shared<TrafficArgs>();
    TrafficParams& p = a->params;
    CLI::App* cmd = app.add_subcommand(
        "traffic", "Reuse-ratio study: each of the engine's settings over the same seeded traffic, every oracle on, "
                   "beside its twin that builds every plan (kvweld in process: each rebind policy and recycled "
                   "storage; kvweld-paged: block sizes 1..64; llamacpp: each KV layout, graph reuse on and off). Exit 0 when no oracle failed, else 1");
    cmd->add_option("--seed", p.seed, "traffic seed")->capture_default_str()->check(seed_validator());
    cmd->add_option("--ticks", p.ticks, "simulated ticks")->capture_default_str()->check(CLI::Range(1, 1000000));
    cmd->add_option("--slots", p.slots, "server slots (a llama.cpp context's n_seq_max: up to 256)")->capture_default_str()->check(CLI::Range(1, 256));
    cmd->add_option("--model", p.model, kvweld::cat("model dims: ", kvweld::preset_names()))->capture_default_str();
    CLI::Option* arrival_rate =
        cmd->add_option("--arrival-rate", p.arrival_rate,
                        kvweld::cat("Poisson arrivals per tick (steady: default ", kSteadyArrivalRate, ")"))
            ->capture_default_str()->check(CLI::Range(0.0, 16.0));
    CLI::Option* prompt_mean =
        cmd->add_option("--prompt-mean", p.prompt_mean,
                        kvweld::cat("prompt length mean (churn: uniform 1..2*mean-1; steady: log-normal, default ",
                                    kSteadyPromptMean, ")"))
            ->capture_default_str()->check(CLI::Range(1, 1000));
    CLI::Option* output_mean =
        cmd->add_option("--output-mean", p.output_mean,
                        kvweld::cat("output length mean (churn: geometric; steady: log-normal, or a stop token, default ",
                                    kSteadyOutputMean, ")"))
            ->capture_default_str()->check(CLI::Range(1, 1000));
    cmd->add_option("--mode", a->mode,
                    "churn (random admits, preemption, offload and reloads: a new batch shape almost every call) or "
                    "steady (every running sequence decodes every step with the same drafts, chunked prefill within "
                    "--token-budget, preemption only for memory: most steps repeat the last one's shape)")
        ->capture_default_str()->check(CLI::IsMember({"churn", "steady"}));
    cmd->add_option("--token-budget", p.token_budget, "steady: tokens one step may carry (decodes first)")
        ->capture_default_str()->check(CLI::Range(1, 512));
    cmd->add_option("--spec-k", p.spec_k, "speculative k (1 = off)")->capture_default_str()->check(CLI::Range(1, 16));
    cmd->add_option("--accept", p.accept, "draft acceptance probability")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--preempt-rate", p.preempt_rate, "clear and re-prefill, per active request per tick")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--offload-rate", p.offload_rate, "a layer swapped out and in, per active request per tick (engines that can)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--reload-rate", p.reload_rate, "model reloads per tick")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--reload-new-weights", p.reload_new_weights, "share of reloads with new weights")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--adapters", p.adapters,
                    kvweld::cat("per-request LoRA adapters: each request uses one of N or the base model; a step makes one "
                                "call per adapter in use (0..", kLoraPool, "; engines with LoRA)"))
        ->capture_default_str()->check(CLI::Range(0, kLoraPool));
    cmd->add_option("--adapter-switch", a->adapter_switch,
                    "with --adapters: set (before each call, a set of its one adapter) or scales (one set of every "
                    "adapter, the call's at scale 1, the rest at 0)")
        ->capture_default_str()
        ->check(CLI::IsMember({"set", "scales"}));
    cmd->add_flag("--sweep", a->engine.sweep,
                  "also sweep per setting: churn, the arrival rate (0.1..2) and draft acceptance (0..1); steady, the "
                  "concurrent sequences (--slots 1..256) and speculative k (1..16)");
    cmd->add_option("--csv", a->engine.csv, "write every run as CSV here");
    cmd->add_option("--plot", a->engine.plot,
                    "draw the sweep (PNG; needs --sweep): churn, reuse ratio and build share against arrival rate; "
                    "steady, reuse ratio against concurrent sequences and against speculative k");
    cmd->add_option("--json", a->engine.json, "write every run's report as JSON here");
    cmd->add_option("--engine", a->engine.engine, cat("the engine: ", builtin_engine_names(), " or a plugin's .so"))
        ->capture_default_str();
    cmd->add_option("--params", a->engine.params, "one setting to study instead of the engine's own list");
    cmd->add_option("--chunk", a->engine.chunk, "churn: prefill tokens per sequence per step")
        ->capture_default_str()->check(CLI::Range(1, 512));
    cmd->add_option("--server", a->server, "with --engine llama-server: the llama-server binary (default: the cache's build --engine names; its hit rate against the "
                                           "cache model's ideal per setting, over chat, few-shot and agent workloads)");
    cmd->add_option("--requests", a->requests, "with --engine llama-server: requests per workload and setting")
        ->capture_default_str()->check(CLI::Range(1, 100000));
    cmd->add_option("--repeat", a->engine.repeat, "runs per setting; decode time is the best")
        ->capture_default_str()->check(CLI::Range(1, 100));
    cmd->callback([a, &action, prompt_mean, output_mean, arrival_rate] {
        action = [a, prompt_mean, output_mean, arrival_rate] {
            a->params.adapter_switch = adapter_switch_from_string(a->adapter_switch);
            a->params.mode = traffic_mode_from_string(a->mode);
            if (a->params.mode == TrafficMode::steady) {
                if (!prompt_mean->count()) a->params.prompt_mean = kSteadyPromptMean;
                if (!output_mean->count()) a->params.output_mean = kSteadyOutputMean;
                if (!arrival_rate->count()) a->params.arrival_rate = kSteadyArrivalRate;
            }
            if (targets::engine_is_server(a->engine.engine)) return run_server_study(*a);
            return run_study(a->params, a->engine);
        };
    });
}

}  // namespace kvweld::cli
