// The reuse study behind `kvweld traffic`: each of an engine's settings
// (its registry entry's, targets/engine_entry.hpp) over the same seeded
// traffic (sim/traffic.hpp), beside its twin that builds every plan, and
// optionally swept over the load or the shape; then its four outputs (a
// table with the per-shape breakdown, CSV, a gnuplot plot, JSON), in
// traffic_study_report.cpp. The command (cli/traffic_cmd.cpp) only parses
// options and calls these in order.
#pragma once

#include "sim/traffic.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace kvweld::sim {

struct Measured {
    TrafficResult result;
    double seconds = 0.0;  // best of the repeats
};

struct StudyRow {
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

BuildCosts measure_build_costs(const TrafficParams& p, const EngineChoice& base);
// Every setting of the engine over `p`, each `repeat` times (the best decode
// time), beside its twin; `sweep` names the rows' sweep ("base", ...).
std::vector<StudyRow> run_rows(const TrafficParams& p, const EngineChoice& base, int chunk, int repeat,
                               const std::string& sweep, const BuildCosts& costs);
// The sweeps per mode, appended to `rows`: steady over concurrent sequences
// and speculative k; churn over the arrival rate and draft acceptance.
void sweep_rows(const TrafficParams& p, const EngineChoice& base, int chunk, int repeat, const BuildCosts& costs,
                std::vector<StudyRow>& rows);
// What sweep_rows varies, in words (the command's closing line).
std::string sweep_description(TrafficMode mode);

// The outputs (traffic_study_report.cpp).
void print_table(const std::vector<StudyRow>& rows);
void print_shapes(const StudyRow& row);
void write_csv(const std::string& path, const std::vector<StudyRow>& rows);
// The sweep's plot: reuse against the rule's bound and building's share of
// decode time, per swept value (needs gnuplot).
void write_sweep_plot(const std::string& png, const std::vector<StudyRow>& rows, const std::string& engine,
                      TrafficMode mode);
nlohmann::json rows_json(const std::vector<StudyRow>& rows, const BuildCosts& costs, bool ok);

}  // namespace kvweld::sim
