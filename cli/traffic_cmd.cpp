// `kvweld traffic`: the reuse-ratio study. Runs each serving policy over the
// same seeded traffic, all oracles on, and prints reuse against the ideal.
#include "cli/commands.hpp"
#include "engines/registry.hpp"

#include "sim/report.hpp"
#include "sim/serve/serve_traffic.hpp"
#include "sim/traffic.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace kvweld::cli {

using namespace kvweld::sim;

namespace {

constexpr int kPagedChunk = 16;  // prefill tokens per sequence per step (the paged policy's server)

struct TrafficArgs {
    TrafficParams params;
    std::string csv, plot, json;
    bool sweep = false;
    EngineTrafficArgs engine;  // --engine: the study on an engine behind the ABI
};

double prep_share(std::uint64_t decodes, std::uint64_t rebuilt, std::uint64_t rebound, const OpCosts& c) {
    const double prep = double(rebuilt) * c.build + double(rebound) * c.rebind;
    const double total = double(decodes) * c.decode + prep;
    return total > 0 ? prep / total : 0.0;
}

// One policy's figures, whichever simulator ran it: kvweld's own (the
// dense policies, slot by slot) or the serving simulator (paged, through
// kvweld's paged engine behind the ABI, in batched steps).
struct Row {
    std::string sweep, policy;
    double arrival = 0, accept = 0;
    std::uint64_t decodes = 0, kept = 0, rebound = 0, rebuilt = 0, ideal_kept = 0;
    double share = 0;
    bool pass = false;
    std::string failure;    // the verdict and the oracle's words when not pass
    PoolStats pool;         // paged only
    nlohmann::json report;  // for --json

    double reuse() const { return decodes ? double(kept) / double(decodes) : 0.0; }
    double ideal() const { return decodes ? double(ideal_kept) / double(decodes) : 0.0; }
    bool ok() const { return pass && kept == ideal_kept; }
};

Row dense_row(const TrafficParams& p, const Policy& policy, const OpCosts& costs, const std::string& sweep) {
    const PolicyResult r = run_traffic(p, policy);
    const RunStats& s = r.run.stats;
    Row row{sweep, policy.name, p.arrival_rate, p.accept, s.decodes, s.kept, s.rebound, s.rebuilt, s.justified_kept,
            prep_share(s.decodes, s.rebuilt, s.rebound, costs), r.run.verdict == Verdict::pass, "", {}, json_report(r.run)};
    if (!row.pass) row.failure = cat(to_string(r.run.verdict), ": ", r.run.failure->detail);
    return row;
}

// The paged policy's pool: block size 16 unless swept, and room for every
// slot's mean request (prompt and output means), so that longer requests
// make the scheduler wait, preempt, and at times grow the pool.
std::string paged_params(const TrafficParams& p, int block) {
    const int mean = p.prompt_mean + p.output_mean;
    return cat("block=", block, ",blocks=", std::max(1, p.slots * ((mean + block - 1) / block)));
}

Row paged_row(const TrafficParams& p, int block, const OpCosts& costs, const std::string& sweep) {
    const EngineTrafficResult r = run_engine_traffic(p, {"kvweld-paged", paged_params(p, block), ""}, kPagedChunk);
    const ServeStats& s = r.run.stats;
    // The paged rule allows no reuse it does not require (may_reuse is 0),
    // so its must_reuse is the exact ideal the other rows have.
    Row row{sweep, "paged", p.arrival_rate, p.accept, s.plans, s.reused, s.rebinds, s.builds, s.must_reuse,
            prep_share(s.plans, s.builds, s.rebinds, costs), r.run.verdict == Verdict::pass, "", r.pool, {}};
    if (!row.pass) row.failure = cat(to_string(r.run.verdict), ": ", r.run.failure->detail);
    row.report = {{"verdict", to_string(r.run.verdict)},
                  {"engine", "kvweld-paged"},
                  {"params", r.run.config.engine.params},
                  {"plans", s.plans},
                  {"reused", s.reused},
                  {"builds", s.builds},
                  {"rebinds", s.rebinds},
                  {"must_reuse", s.must_reuse},
                  {"pool", {{"block_size", r.pool.block_size}, {"start_blocks", r.pool.start_blocks},
                            {"end_blocks", r.pool.end_blocks}, {"grows", r.pool.grows},
                            {"utilisation", r.pool.utilisation}, {"preemptions", r.pool.preemptions},
                            {"pool_preemptions", r.pool.pool_preemptions}, {"waits", r.pool.waits}}}};
    if (r.run.failure) row.report["failure"] = r.run.failure->detail;
    return row;
}

std::vector<Row> run_policies(const TrafficParams& p, const OpCosts& costs, const std::string& sweep) {
    std::vector<Row> rows;
    for (const Policy& policy : study_policies()) rows.push_back(dense_row(p, policy, costs, sweep));
    rows.push_back(paged_row(p, 16, costs, sweep));
    return rows;
}

bool row_ok(const Row& r) { return r.ok(); }

void print_table(const std::vector<Row>& rows) {
    std::printf("%-14s %8s %8s %8s %8s %7s %7s %10s  %s\n", "policy", "decodes", "kept", "rebound", "rebuilt", "reuse",
                "ideal", "prep/dec", "verdict");
    for (const Row& r : rows)
        std::printf("%-14s %8llu %8llu %8llu %8llu %7.4f %7.4f %9.2f%%  %s\n", r.policy.c_str(),
                    (unsigned long long)r.decodes, (unsigned long long)r.kept, (unsigned long long)r.rebound,
                    (unsigned long long)r.rebuilt, r.reuse(), r.ideal(), 100.0 * r.share,
                    r.pass ? (r.ok() ? "pass" : "FAIL reuse != ideal") : cat("FAIL ", r.failure).c_str());
    for (const Row& r : rows)
        if (r.pool.paged) std::printf("%s pool: %s\n", r.policy.c_str(), describe(r.pool).c_str());
}

void write_csv(const std::string& path, const std::vector<Row>& rows) {
    std::ofstream out(path, std::ios::trunc);
    require(out.good(), "--csv ", path, ": cannot open for writing");
    out << "sweep,policy,arrival_rate,accept,decodes,kept,rebound,rebuilt,reuse_ratio,ideal_ratio,prep_share,"
           "block_size,pool_blocks,pool_grows,pool_utilisation,preemptions,pool_preemptions\n";
    for (const Row& r : rows) {
        out << r.sweep << ',' << r.policy << ',' << r.arrival << ',' << r.accept << ',' << r.decodes << ',' << r.kept
            << ',' << r.rebound << ',' << r.rebuilt << ',' << r.reuse() << ',' << r.ideal() << ',' << r.share;
        if (r.pool.paged)
            out << ',' << r.pool.block_size << ',' << r.pool.end_blocks << ',' << r.pool.grows << ','
                << r.pool.utilisation << ',' << r.pool.preemptions << ',' << r.pool.pool_preemptions << '\n';
        else
            out << ",,,,,,\n";
    }
}

// Four panels: reuse ratio (solid) and its ideal (dashed), and the plan-
// preparation share of decode time, each against acceptance rate and
// against arrival rate. The data sits in the script as named blocks.
void write_plot(const std::string& png, const std::vector<Row>& rows) {
    const std::string script = png + ".gp";
    std::ofstream gp(script, std::ios::trunc);
    require(gp.good(), "--plot ", png, ": cannot write ", script);
    std::vector<std::string> policies;
    for (const Policy& p : study_policies()) policies.push_back(p.name);
    policies.push_back("paged");
    auto block = [](const std::string& sweep, std::size_t policy) { return cat("$", sweep, policy); };
    for (const char* sweep : {"accept", "arrival"})
        for (std::size_t i = 0; i < policies.size(); ++i) {
            gp << block(sweep, i) << " << EOD\n";
            for (const Row& r : rows)
                if (r.sweep == sweep && r.policy == policies[i])
                    gp << (r.sweep == "accept" ? r.accept : r.arrival) << ' ' << r.reuse() << ' ' << r.ideal() << ' '
                       << 100.0 * r.share << '\n';
            gp << "EOD\n";
        }
    gp << "set terminal pngcairo size 1200,900 noenhanced\n"
       << "set output '" << png << "'\n"
       << "set key bottom right\nset grid\n"
       << "set multiplot layout 2,2 title 'kvweld: plan reuse per serving policy (same traffic per point, all oracles on)'\n";
    for (const char* what : {"reuse", "prep"})
        for (const char* sweep : {"accept", "arrival"}) {
            const bool reuse = std::string(what) == "reuse";
            gp << "set xlabel '" << (std::string(sweep) == "accept" ? "draft acceptance rate" : "arrival rate (requests / tick)")
               << "'\nset ylabel '" << (reuse ? "reuse ratio (kept / decodes); dashed: ideal" : "plan preparation, % of decode time")
               << "'\nplot ";
            for (std::size_t i = 0; i < policies.size(); ++i) {
                gp << (i ? ", " : "") << block(sweep, i) << " using 1:" << (reuse ? 2 : 4)
                   << " with linespoints lw 2 lc " << i + 1 << " title '" << policies[i] << "'";
                if (reuse) gp << ", " << block(sweep, i) << " using 1:3 with lines dt 2 lc " << i + 1 << " notitle";
            }
            gp << "\n";
        }
    gp << "unset multiplot\n";
    gp.close();
    const int rc = std::system(cat("gnuplot '", script, "'").c_str());
    require(rc == 0, "gnuplot failed on ", script, " (exit ", rc, "); is gnuplot installed? (scripts/setup)");
}

int run_traffic_cmd(const TrafficArgs& a) {
    const TrafficParams& p = a.params;
    if (!a.engine.engine.empty()) {
        EngineTrafficArgs e = a.engine;
        e.json = a.json;
        e.csv = a.csv;
        e.plot = a.plot;
        e.sweep = a.sweep;
        return run_engine_traffic_cmd(p, e);
    }
    std::printf("traffic: seed %llu, %d ticks, %d slots, model %s, arrivals %.3g/tick, prompt mean %d, output mean %d,\n"
                "         spec k=%d accept %.2f, preempt %.3g, offload %.3g, reload %.3g per tick\n",
                (unsigned long long)p.seed, p.ticks, p.slots, p.model.c_str(), p.arrival_rate, p.prompt_mean,
                p.output_mean, p.spec_k, p.accept, p.preempt_rate, p.offload_rate, p.reload_rate);
    const OpCosts costs =
        measure_op_costs(draw_config(p.seed, {.model = p.model, .backend = Backend::cpu, .faults = {}}).model);
    std::printf("measured costs on this machine: build %.1f us, rebind %.2f us, kept decode %.1f us\n",
                costs.build * 1e6, costs.rebind * 1e6, costs.decode * 1e6);
    std::vector<Row> rows = run_policies(p, costs, "base");
    print_table(rows);
    bool ok = std::all_of(rows.begin(), rows.end(), row_ok);

    if (a.sweep) {
        std::vector<Row> sweep;
        for (double acc : {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}) {
            TrafficParams q = p;
            q.accept = acc;
            for (Row& r : run_policies(q, costs, "accept")) sweep.push_back(std::move(r));
        }
        for (double rate : {0.1, 0.25, 0.5, 1.0, 2.0}) {
            TrafficParams q = p;
            q.arrival_rate = rate;
            for (Row& r : run_policies(q, costs, "arrival")) sweep.push_back(std::move(r));
        }
        for (int block : {1, 4, 16, 64}) sweep.push_back(paged_row(p, block, costs, cat("block", block)));
        ok = ok && std::all_of(sweep.begin(), sweep.end(), row_ok);
        std::printf("sweep: %zu runs (acceptance 0..1 and arrival rate 0.1..2, every policy; block size 1..64, paged): %s\n",
                    sweep.size(),
                    ok ? "every reuse ratio equals its ideal, no oracle failed" : "FAILURES, see the CSV");
        rows.insert(rows.end(), std::make_move_iterator(sweep.begin()), std::make_move_iterator(sweep.end()));
    }
    if (!a.csv.empty()) write_csv(a.csv, rows);
    if (!a.plot.empty()) {
        require(a.sweep, "--plot needs --sweep (it plots the sweep)");
        write_plot(a.plot, rows);
        std::printf("plot: %s\n", a.plot.c_str());
    }
    if (!a.json.empty()) {
        nlohmann::json j = nlohmann::json::array();
        for (const Row& r : rows) {
            nlohmann::json e = r.report;
            e["policy"] = r.policy;
            e["sweep"] = r.sweep;
            e["arrival_rate"] = r.arrival;
            e["accept"] = r.accept;
            e["prep_share"] = r.share;
            j.push_back(e);
        }
        write_json(a.json, {{"costs_us", {{"build", costs.build * 1e6}, {"rebind", costs.rebind * 1e6},
                                          {"decode", costs.decode * 1e6}}},
                            {"ok", ok},
                            {"runs", j}});
    }
    std::printf("traffic verdict: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

}  // namespace

void add_traffic_command(CLI::App& app, std::function<int()>& action) {
    auto a = std::make_shared<TrafficArgs>();
    TrafficParams& p = a->params;
    CLI::App* cmd = app.add_subcommand("traffic", "Reuse-ratio study: each policy (fresh+rebuild, fresh+rebind, recycle, "
                                                  "paged) over the same seeded traffic, all oracles on. Exit 0 when every "
                                                  "reuse ratio equals its ideal and no oracle failed, else 1");
    cmd->add_option("--seed", p.seed, "traffic seed")->capture_default_str()->check(seed_validator());
    cmd->add_option("--ticks", p.ticks, "simulated ticks")->capture_default_str()->check(CLI::Range(1, 1000000));
    cmd->add_option("--slots", p.slots, "server slots")->capture_default_str()->check(CLI::Range(1, 16));
    cmd->add_option("--model", p.model, kvweld::cat("model dims: ", kvweld::preset_names()))->capture_default_str();
    cmd->add_option("--arrival-rate", p.arrival_rate, "Poisson arrivals per tick")->capture_default_str()->check(CLI::Range(0.0, 16.0));
    cmd->add_option("--prompt-mean", p.prompt_mean, "prompt length mean (uniform 1..2*mean-1)")->capture_default_str()->check(CLI::Range(1, 100));
    cmd->add_option("--output-mean", p.output_mean, "output length mean (geometric)")->capture_default_str()->check(CLI::Range(1, 1000));
    cmd->add_option("--spec-k", p.spec_k, "speculative k (1 = off)")->capture_default_str()->check(CLI::Range(1, 16));
    cmd->add_option("--accept", p.accept, "draft acceptance probability")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--preempt-rate", p.preempt_rate, "clear() per active request per tick")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--offload-rate", p.offload_rate, "set_layer() restore per active request per tick")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--reload-rate", p.reload_rate, "model reloads per tick")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--reload-new-weights", p.reload_new_weights, "share of reloads with new weights")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    cmd->add_flag("--sweep", a->sweep, "also sweep acceptance rate (0..1) and arrival rate (0.1..2), and the paged "
                                       "policy's block size (1..64)");
    cmd->add_option("--csv", a->csv, "write every run as CSV here");
    cmd->add_option("--plot", a->plot, "draw reuse ratio and preparation share against acceptance and arrival rate (PNG; needs --sweep)");
    cmd->add_option("--json", a->json, "write every run's report as JSON here");
    cmd->add_option("--engine", a->engine.engine,
                    cat("study an engine behind the plugin ABI (", builtin_engine_names(), " or a .so) instead of "
                        "kvweld's policies; for llamacpp, each KV layout with graph reuse on and off"));
    cmd->add_option("--params", a->engine.params, "the --engine's settings (default for llamacpp: both layouts)");
    cmd->add_option("--chunk", a->engine.chunk, "--engine: prefill tokens per sequence per step")
        ->capture_default_str()->check(CLI::Range(1, 512));
    cmd->add_option("--repeat", a->engine.repeat, "--engine: runs per setting; decode time is the best")
        ->capture_default_str()->check(CLI::Range(1, 100));
    cmd->callback([a, &action] { action = [a] { return run_traffic_cmd(*a); }; });
}

}  // namespace kvweld::cli
