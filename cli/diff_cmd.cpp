// `kvweld diff --engine A --engine B`: two engines in lockstep on the same
// seeds (sim/diff.hpp); a progress line, a table, the reproduce command of
// every seed that differs and a shrunk trace of the first of each kind.
#include "cli/commands.hpp"

#include "targets/abi_lists.hpp"
#include "sim/diff.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <thread>
#include <unistd.h>

namespace kvweld::cli {

using namespace kvweld::sim;

namespace {

struct DiffArgs {
    RunOptions run;                  // --engine twice: engines[0] and engines[1]
    std::vector<std::string> engines;
    std::optional<std::string> params_b;
    std::vector<std::string> faults_b;
    double tolerance = PeerChoice{}.tolerance;
    std::string seeds = "0..49";
    int jobs = 0;
    std::string traces = "kvweld-diff";
    int shrink_runs = 400;
    int max_shrinks = 8;
    std::string json;
};

// Engine B's choice, checked as engine A's is (its name, its faults).
PeerChoice peer_choice(const DiffArgs& a) {
    RunOptions b = a.run;
    b.engine = a.engines[1];
    b.params = a.params_b.value_or(a.run.params);
    b.faults = a.faults_b;
    b.twin = false;
    const EngineChoice checked = engine_choice(b);
    return {checked.engine, checked.params, checked.faults, a.tolerance};
}

nlohmann::json diff_json(const DiffResult& r, const DiffOptions& o) {
    nlohmann::json seeds = nlohmann::json::array();
    for (const RunResult& s : r.swarm.seeds) {
        if (s.verdict == Verdict::pass) continue;
        nlohmann::json calls = nlohmann::json::array();
        for (const ReuseDiff& d : s.reuse_diffs)
            calls.push_back({{"op", d.op_index}, {"kind", d.op}, {"shape", d.shape}, {"before", d.before},
                             {"a", {{"reused", d.engine.reused}, {"built", d.engine.built}, {"rebound", d.engine.rebound}}},
                             {"b", {{"reused", d.peer.reused}, {"built", d.peer.built}, {"rebound", d.peer.rebound}}}});
        seeds.push_back({{"seed", s.config.seed},
                         {"verdict", to_string(s.verdict)},
                         {"detail", s.failure ? s.failure->detail : ""},
                         {"calls", calls},
                         {"reproduce", reproduce_command(s.config, o.swarm.steps)}});
    }
    nlohmann::json shrunk = nlohmann::json::array();
    for (const ShrunkTrace& t : r.shrunk)
        shrunk.push_back({{"seed", t.seed}, {"verdict", to_string(t.verdict)}, {"ops", t.ops_after}, {"trace", t.path}});
    const RunStats& t = r.swarm.total;
    return {{"format", "kvweld-diff"},
            {"version", 1},
            {"a", {{"engine", o.swarm.engine.engine}, {"build", targets::engine_build(o.swarm.engine.engine)}}},
            {"b", {{"engine", o.swarm.engine.peer->engine}, {"build", targets::engine_build(o.swarm.engine.peer->engine)}}},
            {"range", {o.swarm.first, o.swarm.last}},
            {"steps", o.swarm.steps},
            {"same", r.same()},
            {"calls", t.calls},
            {"rows", t.peer_rows},
            {"max_logit_error", t.max_peer_error},
            {"reused", {t.reused, t.peer_reused}},
            {"built", {t.builds, t.peer_builds}},
            {"rebound", {t.rebinds, t.peer_rebinds}},
            {"reuse_more", t.reuse_more},
            {"reuse_fewer", t.reuse_fewer},
            {"prepared_otherwise", t.prepared_otherwise},
            {"differing_seeds", seeds},
            {"shrunk", shrunk}};
}

int run_diff_cmd(DiffArgs& a) {
    require(a.engines.size() == 2, "diff: give --engine twice (engine A, then engine B); got ", a.engines.size());
    a.run.engine = a.engines[0];
    a.run.twin = false;
    const auto [first, last] = parse_seed_range(a.seeds);
    DiffOptions o;
    o.swarm.first = first;
    o.swarm.last = last;
    o.swarm.jobs = a.jobs > 0 ? a.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
    o.swarm.steps = a.run.steps;
    o.swarm.engine = engine_choice(a.run);
    o.swarm.engine.peer = peer_choice(a);
    o.swarm.model = a.run.model;
    o.traces_dir = a.traces;
    o.shrink_runs = a.shrink_runs;
    o.max_shrinks = a.max_shrinks;
    const std::size_t total = std::size_t(last - first) + 1;
    std::printf("diff: seeds %llu..%llu (%zu), %d steps each, %d jobs: engine A %s, engine B %s\n",
                (unsigned long long)first, (unsigned long long)last, total, o.swarm.steps, o.swarm.jobs,
                o.swarm.engine.engine.c_str(), o.swarm.engine.peer->engine.c_str());
    std::fflush(stdout);
    const bool tty = isatty(STDERR_FILENO);
    const auto start = std::chrono::steady_clock::now();
    const DiffResult r = run_diff(
        o,
        [&](std::size_t done, std::size_t differ) {
            if (!tty) return;
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::fprintf(stderr, "\r[diff] %zu/%zu seeds  %.1f seeds/s  %zu differ   ", done, total,
                         double(done) / std::max(secs, 1e-9), differ);
        },
        [&](const std::string& line) { std::fprintf(stderr, "%s[diff] %s\n", tty ? "\n" : "", line.c_str()); });
    if (tty) std::fprintf(stderr, "\n");
    const std::string table = diff_table(r, o);
    std::fwrite(table.data(), 1, table.size(), stdout);
    if (!a.json.empty()) write_json(a.json, diff_json(r, o));
    return r.same() ? 0 : 1;
}

}  // namespace

void add_diff_command(CLI::App& app, std::function<int()>& action) {
    auto args = std::make_shared<DiffArgs>();
    CLI::App* cmd = app.add_subcommand(
        "diff",
        "Two engines (two releases, two settings, two plugins, or one engine with and without a fault switch) on the "
        "same seeds, ops and tokens in lockstep, with no reuse rule and no reference: every call where one reused a "
        "plan and the other prepared one (with the batch and the ops before it), every row where they disagree past "
        "--tolerance, each with its reproduce command, and a shrunk trace of the first seed of each kind. "
        "Exit 0 the same, 1 they differ, 2 bad input");
    add_run_options(cmd, args->run);
    // One engine is not enough here: --engine is given twice, and there is no twin.
    cmd->remove_option(cmd->get_option("--engine"));
    cmd->remove_option(cmd->get_option("--twin"));
    cmd->remove_option(cmd->get_option("--known-findings"));  // a difference is a difference, whoever's bug it is
    cmd->add_option("--engine", args->engines, "engine A, then engine B (given twice): a built-in name (" +
                                                   builtin_engine_names() + "; llamacpp@V another llama.cpp release built "
                                                   "by scripts/setup-llama --version V) or a plugin's path")
        ->required();
    cmd->get_option("--params")->description("both engines' settings, k=v,... (a setting not given is drawn per seed, "
                                             "the same for both where they share an entry)");
    cmd->get_option("--fault")->description("a fault switch of engine A (repeatable)");
    cmd->add_option("--params-b", args->params_b, "engine B's settings instead of --params");
    cmd->add_option("--fault-b", args->faults_b, "a fault switch of engine B (repeatable)");
    cmd->add_option("--tolerance", args->tolerance, "logit_error past which two rows differ")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--seeds", args->seeds, "seed range A..B, inclusive")->capture_default_str();
    cmd->add_option("--jobs", args->jobs, "worker threads (default: all cores)")->check(CLI::Range(0, 1024));
    cmd->add_option("--traces", args->traces, "where the shrunk traces go")->capture_default_str();
    cmd->add_option("--shrink-runs", args->shrink_runs, "runs each shrink may take (0: do not shrink)")
        ->capture_default_str()
        ->check(CLI::Range(0, 100000));
    cmd->add_option("--max-shrinks", args->max_shrinks,
                    "kinds of difference shrunk, the first seed of each (kind: how it ended, at which op, who reused more)")
        ->capture_default_str()
        ->check(CLI::Range(0, 1000));
    cmd->add_option("--json", args->json, "write the diff as JSON here");
    cmd->callback([args, &action] { action = [args] { return run_diff_cmd(*args); }; });
}

}  // namespace kvweld::cli
