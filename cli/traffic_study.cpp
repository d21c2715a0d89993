// `kvweld traffic`: the reuse study (sim/traffic.hpp) on any
// engine, each of its settings over the same traffic beside its twin that
// builds every plan: the ratio of reused plans against the rule's ideal,
// and the share of decode time spent building plans. For kvweld's dense
// engine, each rebind policy and recycled storage; for llama.cpp, each KV
// layout with graph reuse on and off.
#include "cli/commands.hpp"

#include "sim/json_report.hpp"

#include "sim/report.hpp"
#include "targets/registry.hpp"
#include "sim/traffic.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <map>

namespace kvweld::cli {

using namespace kvweld::sim;

namespace {

// The settings compared are the engine's registry entry's (targets/engine_entry.hpp).
std::vector<StudySetting> settings_for(const std::string& engine, const std::string& params, const TrafficParams& p) {
    return study_settings_for(engine, params, {p.slots, p.prompt_mean + p.output_mean});
}

struct Measured {
    TrafficResult result;
    double seconds = 0.0;  // best of the repeats
};

Measured measure(const TrafficParams& p, const EngineChoice& e, int chunk, int repeat) {
    Measured m{run_traffic(p, e, chunk), 0.0};
    m.seconds = m.result.decode_seconds;
    for (int i = 1; i < repeat; ++i) m.seconds = std::min(m.seconds, run_traffic(p, e, chunk).decode_seconds);
    return m;
}

struct Row {
    std::string sweep;  // "base", "arrival", "accept" (churn); "slots", "spec_k" (steady)
    double arrival = 0, accept = 0;
    int slots = 0, spec_k = 0;
    StudySetting setting;
    Measured with, without;  // reuse on; reuse off (empty when none)
    bool has_without = false;
    double build_seconds = std::nan("");  // one graph build, measured apart (measure_build_seconds)
    // Plan building's share of decode time: builds x one build's cost / time.
    // A plan neither reused nor rebound was built (llama.cpp counts reuses
    // only; a rebind costs next to nothing).
    // Without a rule (a release outside its table) there is no plan count:
    // the engine's own count of builds.
    static double share(const Measured& m, double build_seconds) {
        const RunStats& s = m.result.run.stats;
        const std::uint64_t built = m.result.run.oracles.accounting ? s.plans - std::min(s.plans, s.reused + s.rebinds)
                                                                    : s.builds;
        return double(built) * build_seconds / m.seconds;
    }
    bool ok() const {
        return with.result.run.verdict == Verdict::pass && (!has_without || without.result.run.verdict == Verdict::pass);
    }
};

// One build's cost per setting, measured once per command.
using BuildCosts = std::map<std::string, double>;

BuildCosts measure_build_costs(const TrafficParams& p, const EngineChoice& base, const std::string& engine) {
    BuildCosts costs;
    for (const StudySetting& s : settings_for(engine, base.params, p))
        costs[s.params] = s.no_reuse.empty() ? std::nan("")
                                             : measure_build_seconds({base.engine, s.params, ""},
                                                                     {base.engine, s.no_reuse, ""}, p.model);
    return costs;
}

std::vector<Row> run_rows(const TrafficParams& p, const EngineChoice& base, int chunk, int repeat,
                          const std::string& sweep, const BuildCosts& costs) {
    std::vector<Row> rows;
    for (const StudySetting& s : settings_for(base.engine, base.params, p)) {
        Row row{sweep, p.arrival_rate, p.accept, p.slots, p.spec_k, s, {}, {}, !s.no_reuse.empty(), costs.at(s.params)};
        TrafficParams q = p;
        q.recycle = s.recycle;
        row.with = measure(q, {base.engine, s.params, ""}, chunk, repeat);
        if (row.has_without) row.without = measure(q, {base.engine, s.no_reuse, ""}, chunk, repeat);
        rows.push_back(std::move(row));
    }
    return rows;
}

std::string share_text(double share) { return std::isnan(share) ? "n/a" : cat(fixed(100.0 * share, 1), "%"); }

// The rule's ideal: the share of graphs it requires reused, or the range
// up to the share it allows where it cannot predict (clause 3).
std::string ideal_text(const RunStats& s) {
    if (!s.plans) return "-";
    const std::string must = fixed(s.ideal_ratio(), 4);
    return s.may_reuse ? cat(must, "..", fixed(double(s.must_reuse + s.may_reuse) / double(s.plans), 4)) : must;
}

// The reuse ratio over the rule's plans; without a rule, over what the
// engine counted (reused + built + rebound), marked with a '*'.
double reuse_value(const RunResult& r) {
    return r.oracles.accounting ? r.stats.reuse_ratio() : r.stats.counted_reuse_ratio();
}
std::string reuse_text(const RunResult& r) { return cat(fixed(reuse_value(r), 4), r.oracles.accounting ? "" : "*"); }

void print_row(const std::string& label, const Measured& m, const std::string& share) {
    const RunStats& s = m.result.run.stats;
    const RunResult& r = m.result.run;
    const std::string plans = r.oracles.accounting ? std::to_string(s.plans) : "n/a";
    std::printf("%-30s %6llu %5.3f %6s %6llu %6llu %7llu %7s %-14s %8.4f %6s  %s\n", label.c_str(),
                (unsigned long long)s.calls, s.calls ? double(s.same_shape_calls) / double(s.calls) : 0.0,
                plans.c_str(), (unsigned long long)s.reused,
                (unsigned long long)s.builds, (unsigned long long)s.rebinds, reuse_text(r).c_str(), ideal_text(s).c_str(),
                m.seconds, share.c_str(),
                r.verdict == Verdict::pass ? "pass"
                                           : cat("FAIL ", to_string(r.verdict), r.failure ? ": " + r.failure->detail : "").c_str());
}

void print_table(const std::vector<Row>& rows) {
    std::printf("%-30s %6s %5s %6s %6s %6s %7s %7s %-14s %8s %6s  %s\n", "setting", "calls", "same", "plans", "reused",
                "built", "rebound", "reuse", "rule's ideal", "decode s", "build", "verdict");
    bool unruled = false;
    for (const Row& r : rows) {
        print_row(r.setting.label(), r.with, share_text(Row::share(r.with, r.build_seconds)));
        if (r.has_without)
            print_row(cat(r.setting.no_reuse, r.setting.recycle ? " recycle" : ""), r.without,
                      share_text(Row::share(r.without, r.build_seconds)));
        unruled = unruled || !r.with.result.run.oracles.accounting;
    }
    if (unruled)
        std::printf("* no reuse rule applies to this build, so no plan count (n/a): reuse is reused / (reused + built "
                    "+ rebound) as the engine counted, and build is the engine's builds\n");
}

void print_shapes(const Row& row) {
    std::vector<std::pair<std::string, ShapeStats>> shapes(row.with.result.shapes.begin(), row.with.result.shapes.end());
    std::sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) {
        return a.second.calls != b.second.calls ? a.second.calls > b.second.calls : a.first < b.first;
    });
    std::printf("per batch shape (%s; sequences x tokens each), the 12 with most calls:\n",
                row.setting.label().c_str());
    std::printf("  %-10s %7s %7s %10s %7s %7s  %s\n", "shape", "calls", "graphs", "rule: must", "reused", "built",
                "reused where the rule allows");
    const bool ruled = row.with.result.run.oracles.accounting;
    for (std::size_t i = 0; i < shapes.size() && i < 12; ++i) {
        const ShapeStats& s = shapes[i].second;
        const std::uint64_t allowed = s.must_reuse + s.may_reuse;
        const auto rule_figure = [&](std::uint64_t v) { return ruled ? std::to_string(v) : std::string("n/a"); };
        std::printf("  %-10s %7llu %7s %10s %7llu %7llu  %s\n", shapes[i].first.c_str(), (unsigned long long)s.calls,
                    rule_figure(s.plans).c_str(), rule_figure(s.must_reuse).c_str(), (unsigned long long)s.reused,
                    (unsigned long long)s.built,
                    !ruled    ? "n/a (no rule)"
                    : allowed ? cat(fixed(100.0 * double(s.reused) / double(allowed), 1), "% of ", allowed).c_str()
                              : "(none allowed)");
    }
}

void write_csv(const std::string& path, const std::vector<Row>& rows) {
    std::ofstream out(path, std::ios::trunc);
    require(out.good(), "--csv ", path, ": cannot open for writing");
    out << "sweep,setting,arrival_rate,accept,slots,spec_k,calls,same_shape_calls,graphs,reused,reuse_ratio,ideal_ratio,"
           "may_reuse,decode_s,decode_s_no_reuse,build_us,build_share,build_share_no_reuse\n";
    for (const Row& r : rows) {
        const RunStats& s = r.with.result.run.stats;
        out << r.sweep << ',' << '"' << r.setting.label() << '"' << ',' << r.arrival << ',' << r.accept << ','
            << r.slots << ',' << r.spec_k << ',' << s.calls << ',' << s.same_shape_calls << ',' << s.plans << ','
            << s.reused << ',' << reuse_value(r.with.result.run) << ',' << s.ideal_ratio() << ',' << s.may_reuse << ','
            << r.with.seconds << ',' << (r.has_without ? r.without.seconds : std::nan("")) << ','
            << r.build_seconds * 1e6 << ',' << Row::share(r.with, r.build_seconds) << ','
            << (r.has_without ? Row::share(r.without, r.build_seconds) : std::nan("")) << '\n';
    }
}

// One panel of the sweep's plot: the rows of one sweep, x from each row,
// and either the reuse ratio (solid) with the most the rule allows
// (dashed), or graph building's share of decode time.
struct Panel {
    const char* sweep;
    double (*x)(const Row&);
    bool reuse;
    const char* xlabel;
};

void write_plot(const std::string& png, const std::vector<Row>& rows, const std::string& engine,
                const std::vector<Panel>& panels, const std::string& title) {
    const std::string script = png + ".gp";
    std::ofstream gp(script, std::ios::trunc);
    require(gp.good(), "--plot ", png, ": cannot write ", script);
    std::vector<std::string> settings;
    for (const Row& r : rows)
        if (std::find(settings.begin(), settings.end(), r.setting.label()) == settings.end())
            settings.push_back(r.setting.label());
    for (std::size_t p = 0; p < panels.size(); ++p)
        for (std::size_t i = 0; i < settings.size(); ++i) {
            gp << "$p" << p << "s" << i << " << EOD\n";
            for (const Row& r : rows)
                if (r.sweep == panels[p].sweep && r.setting.label() == settings[i]) {
                    const double share = Row::share(r.with, r.build_seconds);
                    const RunStats& st = r.with.result.run.stats;
                    const double allowed = st.plans ? double(st.must_reuse + st.may_reuse) / double(st.plans) : 0.0;
                    gp << panels[p].x(r) << ' ' << reuse_value(r.with.result.run) << ' ' << allowed << ' '
                       << (std::isnan(share) ? 0.0 : 100.0 * share) << '\n';
                }
            gp << "EOD\n";
        }
    gp << "set terminal pngcairo size 1200,500 noenhanced\nset output '" << png << "'\nset key top right\nset grid\n"
       << "set multiplot layout 1," << panels.size() << " title '" << engine << ": " << title << "'\n";
    for (std::size_t p = 0; p < panels.size(); ++p) {
        gp << "set xlabel '" << panels[p].xlabel << "'\nset ylabel '"
           << (panels[p].reuse ? "reused plans / plans; dashed: the most the rule allows" : "plan building, % of decode time")
           << "'\nplot ";
        for (std::size_t i = 0; i < settings.size(); ++i) {
            gp << (i ? ", " : "") << "$p" << p << "s" << i << " using 1:" << (panels[p].reuse ? 2 : 4)
               << " with linespoints lw 2 lc " << i + 1 << " title '" << settings[i] << "'";
            if (panels[p].reuse) gp << ", $p" << p << "s" << i << " using 1:3 with lines dt 2 lc " << i + 1 << " notitle";
        }
        gp << "\n";
    }
    gp << "unset multiplot\n";
    gp.close();
    const int rc = std::system(cat("gnuplot '", script, "'").c_str());
    require(rc == 0, "gnuplot failed on ", script, " (exit ", rc, "); is gnuplot installed? (scripts/setup)");
}

double arrival_of(const Row& r) { return r.arrival; }
double slots_of(const Row& r) { return r.slots; }
double spec_k_of(const Row& r) { return r.spec_k; }

// The sweeps per mode, each a run of every setting per value.
void sweep(const TrafficParams& p, const EngineChoice& base, const TrafficStudyArgs& a, const BuildCosts& costs,
           std::vector<Row>& rows) {
    const auto add = [&](const TrafficParams& q, const char* name) {
        for (Row& r : run_rows(q, base, a.chunk, a.repeat, name, costs)) rows.push_back(std::move(r));
    };
    if (p.mode == TrafficMode::steady) {
        // Up to the concurrency and draft widths production servers run.
        for (int slots : {1, 2, 4, 8, 16, 64, 256}) {
            TrafficParams q = p;
            q.slots = slots;
            q.arrival_rate = p.arrival_rate * slots / p.slots;  // the same load per sequence
            add(q, "slots");
        }
        for (int k : {1, 2, 4, 8, 16}) {
            TrafficParams q = p;
            q.spec_k = k;
            add(q, "spec_k");
        }
        return;
    }
    for (double rate : {0.1, 0.25, 0.5, 1.0, 2.0}) {
        TrafficParams q = p;
        q.arrival_rate = rate;
        add(q, "arrival");
    }
    for (double accept : {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}) {
        TrafficParams q = p;
        q.accept = accept;
        add(q, "accept");
    }
}

}  // namespace

// Every run as the serving report (json_report.hpp) with its decode time and
// graph building's share, per setting, reuse on and off.
nlohmann::json rows_json(const std::vector<Row>& rows, const BuildCosts& costs, bool ok) {
    const auto measured = [](const Measured& m, double build_seconds) {
        nlohmann::json j = json_report(m.result.run);
        j["decode_seconds"] = m.seconds;
        const double share = Row::share(m, build_seconds);
        j["build_share"] = std::isnan(share) ? nlohmann::json() : nlohmann::json(share);
        return j;
    };
    nlohmann::json runs = nlohmann::json::array();
    for (const Row& r : rows) {
        nlohmann::json j = {{"sweep", r.sweep}, {"arrival_rate", r.arrival}, {"accept", r.accept},
                            {"params", r.setting.params},
                            {"recycle", r.setting.recycle},
                            {"with_reuse", measured(r.with, r.build_seconds)}};
        if (r.has_without) j["without_reuse"] = measured(r.without, r.build_seconds);
        runs.push_back(std::move(j));
    }
    nlohmann::json build_us = nlohmann::json::object();
    for (const auto& [setting, secs] : costs)
        build_us[setting] = std::isnan(secs) ? nlohmann::json() : nlohmann::json(secs * 1e6);
    return {{"ok", ok}, {"build_us", build_us}, {"runs", runs}};
}

int run_traffic_study(const TrafficParams& p, const TrafficStudyArgs& a) {
    const EngineChoice base{a.engine, a.params, ""};
    require_engine(base.engine);
    const std::string name = engine_display_name(base.engine);
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
    std::fflush(stdout);
    const BuildCosts costs = measure_build_costs(p, base, base.engine);
    for (const auto& [setting, secs] : costs)
        if (!std::isnan(secs))
            std::printf("one graph build (%s), measured apart: %.1f us\n", setting.c_str(), secs * 1e6);
    std::vector<Row> rows = run_rows(p, base, a.chunk, a.repeat, "base", costs);
    print_table(rows);
    for (const Row& r : rows)
        if (r.with.result.pool.paged)
            std::printf("pool (%s): %s\n", r.setting.label().c_str(), describe(r.with.result.pool).c_str());
    print_shapes(rows.front());
    bool ok = std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.ok(); });
    if (a.sweep) {
        sweep(p, base, a, costs, rows);
        ok = ok && std::all_of(rows.begin(), rows.end(), [](const Row& r) { return r.ok(); });
        std::printf("sweep: %s per setting: %s\n",
                    p.mode == TrafficMode::steady ? "concurrent sequences 1..16 and speculative k 1..8"
                                                  : "arrival rate 0.1..2 and draft acceptance 0..1",
                    ok ? "no oracle failed" : "FAILURES, see the CSV");
    }
    if (!a.csv.empty()) write_csv(a.csv, rows);
    if (!a.json.empty()) write_json(a.json, rows_json(rows, costs, ok));
    if (!a.plot.empty()) {
        require(a.sweep, "--plot needs --sweep (it plots the sweep)");
        if (p.mode == TrafficMode::steady)
            write_plot(a.plot, rows, name,
                       {{"slots", slots_of, true, "concurrent sequences (--slots)"},
                        {"spec_k", spec_k_of, true, "speculative k (tokens per sequence per step)"}},
                       "plan reuse in the steady state (every row checked against the reference)");
        else
            write_plot(a.plot, rows, name,
                       {{"arrival", arrival_of, true, "arrival rate (requests / tick)"},
                        {"arrival", arrival_of, false, "arrival rate (requests / tick)"}},
                       "plan reuse under the same synthetic traffic (every row checked against the reference)");
        std::printf("plot: %s\n", a.plot.c_str());
    }
    std::printf("traffic verdict: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}

}  // namespace kvweld::cli
