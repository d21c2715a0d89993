// The reuse study's driver: the settings, their measured runs, the sweeps
// (sim/traffic_study.hpp).
#include "sim/traffic_study.hpp"

#include "targets/registry.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::sim {

namespace {

// The settings compared are the engine's registry entry's (targets/engine_entry.hpp).
std::vector<StudySetting> settings_for(const std::string& engine, const std::string& params, const TrafficParams& p) {
    return study_settings_for(engine, params, {p.slots, p.prompt_mean + p.output_mean});
}

Measured measure(const TrafficParams& p, const EngineChoice& e, int chunk, int repeat) {
    Measured m{run_traffic(p, e, chunk), 0.0};
    m.seconds = m.result.decode_seconds;
    for (int i = 1; i < repeat; ++i) m.seconds = std::min(m.seconds, run_traffic(p, e, chunk).decode_seconds);
    return m;
}

}  // namespace

BuildCosts measure_build_costs(const TrafficParams& p, const EngineChoice& base) {
    BuildCosts costs;
    for (const StudySetting& s : settings_for(base.engine, base.params, p))
        costs[s.params] = s.no_reuse.empty() ? std::nan("")
                                             : measure_build_seconds({base.engine, s.params, ""},
                                                                     {base.engine, s.no_reuse, ""}, p.model);
    return costs;
}

std::vector<StudyRow> run_rows(const TrafficParams& p, const EngineChoice& base, int chunk, int repeat,
                          const std::string& sweep, const BuildCosts& costs) {
    std::vector<StudyRow> rows;
    for (const StudySetting& s : settings_for(base.engine, base.params, p)) {
        StudyRow row{sweep, p.arrival_rate, p.accept, p.slots, p.spec_k, s, {}, {}, !s.no_reuse.empty(), costs.at(s.params)};
        TrafficParams q = p;
        q.recycle = s.recycle;
        row.with = measure(q, {base.engine, s.params, ""}, chunk, repeat);
        if (row.has_without) row.without = measure(q, {base.engine, s.no_reuse, ""}, chunk, repeat);
        rows.push_back(std::move(row));
    }
    return rows;
}

void sweep_rows(const TrafficParams& p, const EngineChoice& base, int chunk, int repeat, const BuildCosts& costs,
                std::vector<StudyRow>& rows) {
    const auto add = [&](const TrafficParams& q, const char* name) {
        for (StudyRow& r : run_rows(q, base, chunk, repeat, name, costs)) rows.push_back(std::move(r));
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

std::string sweep_description(TrafficMode mode) {
    return mode == TrafficMode::steady ? "concurrent sequences 1..256 and speculative k 1..16"
                                       : "arrival rate 0.1..2 and draft acceptance 0..1";
}

}  // namespace kvweld::sim
