#include "sim/report.hpp"

#include "sim/json_field.hpp"

#include "engine/cat.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace kvweld::sim {

std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

std::string sci(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2e", v);
    return buf;
}

namespace {

std::string blindness_line(const RunStats& s) {
    return cat(s.change_decodes, " decodes after a storage/model change; ", s.data_blind,
               " blind to the data oracle; ", s.independent_blind,
               " blind to data and kv (every oracle that reads no engine report), ",
               s.blind_same_weights_reload, " of them after a same-weights reload");
}

std::string oracles_line(const OracleSwitches& o) {
    auto on = [](bool b) { return b ? "on" : "OFF"; };
    return cat("oracles: data ", on(o.data), ", kv ", on(o.kv), ", weld ", on(o.weld), ", accounting ",
               on(o.accounting));
}

}  // namespace

std::string report_header(const RunResult& r) {
    return cat("kvweld sim: seed ", r.config.seed, ", ", r.steps, " steps\n", r.config.describe(), "\n");
}

std::string report_body(const RunResult& r) {
    const RunStats& s = r.stats;
    std::string out = cat(
        oracles_line(r.oracles), "\n",
        "ops: ", s.ops_run, " run, ", s.ops_skipped, " skipped; requests ", s.requests, "; decodes ",
        s.decodes, "\n",
        "plans (engine):    kept ", s.kept, ", rebound ", s.rebound, ", rebuilt ", s.rebuilt, "\n",
        "plans (justified): kept ", s.justified_kept, ", rebind ", s.justified_rebinds, ", build ",
        s.justified_builds, "\n",
        "spurious ", s.spurious, ", missed ", s.missed, "; reuse ratio ", fixed(s.reuse_ratio(), 4),
        " (ideal ", fixed(s.ideal_ratio(), 4), ")\n",
        "data oracle: max logit error ", sci(s.max_logit_error), "; kv oracle: max K/V error ",
        sci(s.max_kv_error), " (tolerance 1.00e-04)\n",
        "blind spots: ", blindness_line(s), "\n");
    if (r.failure) {
        const Failure& f = *r.failure;
        out += cat("failure at op ", f.op_index, " (", f.op, "), ", to_string(f.oracle),
                   " oracle: ", f.detail, "\n");
    }
    out += cat("verdict: ", r.verdict == Verdict::pass ? "PASS" : "FAIL ", 
               r.verdict == Verdict::pass ? "" : to_string(r.verdict), "\n");
    return out;
}

nlohmann::json json_report(const RunResult& r) {
    const RunStats& s = r.stats;
    nlohmann::json j = {
        {"seed", r.config.seed},
        {"steps", r.steps},
        {"config", r.config},
        {"ops_run", s.ops_run},
        {"ops_skipped", s.ops_skipped},
        {"requests", s.requests},
        {"decodes", s.decodes},
        {"kept", s.kept},
        {"rebound", s.rebound},
        {"rebuilt", s.rebuilt},
        {"justified", {{"kept", s.justified_kept}, {"rebind", s.justified_rebinds}, {"build", s.justified_builds},
                       {"capacity_rebuilds", s.capacity_rebuilds}}},
        {"spurious", s.spurious},
        {"missed", s.missed},
        {"reuse_ratio", s.reuse_ratio()},
        {"ideal_ratio", s.ideal_ratio()},
        {"change_decodes", s.change_decodes},
        {"data_blind", s.data_blind},
        {"independent_blind", s.independent_blind},
        {"blind_same_weights_reload", s.blind_same_weights_reload},
        {"max_logit_error", s.max_logit_error},
        {"max_kv_error", s.max_kv_error},
        {"oracles", {{"data", r.oracles.data}, {"kv", r.oracles.kv}, {"weld", r.oracles.weld},
                     {"accounting", r.oracles.accounting}}},
        {"verdict", to_string(r.verdict)},
        {"exit_code", exit_code(r.verdict)},
    };
    if (r.failure) j["failure"] = failure_json(*r.failure);
    return j;
}

std::string reproduce_command(const SimConfig& c, int steps, const std::string& model_option) {
    std::string cmd = cat("kvweld sim --seed ", c.seed, " --steps ", steps);
    if (!model_option.empty()) cmd += cat(" --model ", model_option);
    if (c.backend != Backend::cpu) cmd += cat(" --backend ", to_string(c.backend));
    for (const FaultInfo& f : all_faults())
        if (c.faults.has(f.fault)) cmd += cat(" --fault ", f.name);
    return cmd;
}

std::string table_row(const char* label, const std::string& value) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "  %-36s %s\n", label, value.c_str());
    return buf;
}

nlohmann::json failure_json(const Failure& f) {
    return {{"op_index", f.op_index}, {"op", f.op}, {"oracle", to_string(f.oracle)}, {"detail", f.detail}};
}

Failure failure_from_json(const nlohmann::json& j) {
    return Failure{json_field<std::size_t>(j, "op_index"), json_field<std::string>(j, "op"),
                   oracle_from_string(json_field<std::string>(j, "oracle")), json_field<std::string>(j, "detail")};
}

nlohmann::json outcomes_json(const std::array<std::uint64_t, kVerdicts>& by_verdict) {
    nlohmann::json out = nlohmann::json::object();
    for (int v = 0; v < kVerdicts; ++v)
        if (by_verdict[std::size_t(v)]) out[std::string(to_string(Verdict(v)))] = by_verdict[std::size_t(v)];
    return out;
}

}  // namespace kvweld::sim
