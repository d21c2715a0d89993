// The reuse study's outputs: the table and per-shape breakdown on stdout,
// CSV, a gnuplot plot and JSON (sim/traffic_study.hpp).
#include "sim/traffic_study.hpp"

#include "sim/json_report.hpp"
#include "sim/report.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace kvweld::sim {

namespace {

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

}  // namespace

void print_table(const std::vector<StudyRow>& rows) {
    std::printf("%-30s %6s %5s %6s %6s %6s %7s %7s %-14s %8s %6s  %s\n", "setting", "calls", "same", "plans", "reused",
                "built", "rebound", "reuse", "rule's ideal", "decode s", "build", "verdict");
    bool unruled = false;
    for (const StudyRow& r : rows) {
        print_row(r.setting.label(), r.with, share_text(StudyRow::share(r.with, r.build_seconds)));
        if (r.has_without)
            print_row(cat(r.setting.no_reuse, r.setting.recycle ? " recycle" : ""), r.without,
                      share_text(StudyRow::share(r.without, r.build_seconds)));
        unruled = unruled || !r.with.result.run.oracles.accounting;
    }
    if (unruled)
        std::printf("* no reuse rule applies to this build, so no plan count (n/a): reuse is reused / (reused + built "
                    "+ rebound) as the engine counted, and build is the engine's builds\n");
    for (const StudyRow& r : rows)
        if (const std::string why = r.with.result.run.stats.may_reuse_why_text(); !why.empty())
            std::printf("%s: the rule allows more than it requires (rule's ideal a..b): %s\n", r.setting.label().c_str(),
                        why.c_str());
}

void print_shapes(const StudyRow& row) {
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

void write_csv(const std::string& path, const std::vector<StudyRow>& rows) {
    std::ofstream out(path, std::ios::trunc);
    require(out.good(), "--csv ", path, ": cannot open for writing");
    out << "sweep,setting,arrival_rate,accept,slots,spec_k,calls,same_shape_calls,graphs,reused,reuse_ratio,ideal_ratio,"
           "may_reuse,decode_s,decode_s_no_reuse,build_us,build_share,build_share_no_reuse\n";
    for (const StudyRow& r : rows) {
        const RunStats& s = r.with.result.run.stats;
        out << r.sweep << ',' << '"' << r.setting.label() << '"' << ',' << r.arrival << ',' << r.accept << ','
            << r.slots << ',' << r.spec_k << ',' << s.calls << ',' << s.same_shape_calls << ',' << s.plans << ','
            << s.reused << ',' << reuse_value(r.with.result.run) << ',' << s.ideal_ratio() << ',' << s.may_reuse << ','
            << r.with.seconds << ',' << (r.has_without ? r.without.seconds : std::nan("")) << ','
            << r.build_seconds * 1e6 << ',' << StudyRow::share(r.with, r.build_seconds) << ','
            << (r.has_without ? StudyRow::share(r.without, r.build_seconds) : std::nan("")) << '\n';
    }
}

namespace {

// One panel of the sweep's plot: the rows of one sweep, x from each row,
// and either the reuse ratio (solid) with the most the rule allows
// (dashed), or graph building's share of decode time.
struct Panel {
    const char* sweep;
    double (*x)(const StudyRow&);
    bool reuse;
    const char* xlabel;
};

void write_plot(const std::string& png, const std::vector<StudyRow>& rows, const std::string& engine,
                const std::vector<Panel>& panels, const std::string& title) {
    const std::string script = png + ".gp";
    std::ofstream gp(script, std::ios::trunc);
    require(gp.good(), "--plot ", png, ": cannot write ", script);
    std::vector<std::string> settings;
    for (const StudyRow& r : rows)
        if (std::find(settings.begin(), settings.end(), r.setting.label()) == settings.end())
            settings.push_back(r.setting.label());
    for (std::size_t p = 0; p < panels.size(); ++p)
        for (std::size_t i = 0; i < settings.size(); ++i) {
            gp << "$p" << p << "s" << i << " << EOD\n";
            for (const StudyRow& r : rows)
                if (r.sweep == panels[p].sweep && r.setting.label() == settings[i]) {
                    const double share = StudyRow::share(r.with, r.build_seconds);
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

double arrival_of(const StudyRow& r) { return r.arrival; }
double slots_of(const StudyRow& r) { return r.slots; }
double spec_k_of(const StudyRow& r) { return r.spec_k; }


}  // namespace

void write_sweep_plot(const std::string& png, const std::vector<StudyRow>& rows, const std::string& engine,
                      TrafficMode mode) {
    if (mode == TrafficMode::steady)
        write_plot(png, rows, engine,
                   {{"slots", slots_of, true, "concurrent sequences (--slots)"},
                    {"spec_k", spec_k_of, true, "speculative k (tokens per sequence per step)"}},
                   "plan reuse in the steady state (every row checked against the reference)");
    else
        write_plot(png, rows, engine,
                   {{"arrival", arrival_of, true, "arrival rate (requests / tick)"},
                    {"arrival", arrival_of, false, "arrival rate (requests / tick)"}},
                   "plan reuse under the same synthetic traffic (every row checked against the reference)");
}

// Every run as the serving report (json_report.hpp) with its decode time and
// graph building's share, per setting, reuse on and off.
nlohmann::json rows_json(const std::vector<StudyRow>& rows, const BuildCosts& costs, bool ok) {
    const auto measured = [](const Measured& m, double build_seconds) {
        nlohmann::json j = json_report(m.result.run);
        j["decode_seconds"] = m.seconds;
        const double share = StudyRow::share(m, build_seconds);
        j["build_share"] = std::isnan(share) ? nlohmann::json() : nlohmann::json(share);
        return j;
    };
    nlohmann::json runs = nlohmann::json::array();
    for (const StudyRow& r : rows) {
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

}  // namespace kvweld::sim
