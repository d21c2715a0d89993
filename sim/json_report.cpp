#include "sim/json_report.hpp"

#include "util/error.hpp"
#include "targets/registry.hpp"
#include "sim/json_field.hpp"
#include "sim/report.hpp"

namespace kvweld::sim {

namespace {

// Every count a run's table prints, under one name each.
constexpr struct {
    const char* name;
    std::uint64_t RunStats::*field;
} kCounts[] = {
    {"ops_run", &RunStats::ops_run},       {"ops_skipped", &RunStats::ops_skipped},
    {"requests", &RunStats::requests},     {"calls", &RunStats::calls},
    {"rows", &RunStats::rows},             {"batched_calls", &RunStats::batched_calls},
    {"same_shape_calls", &RunStats::same_shape_calls},
    {"drafts", &RunStats::drafts},         {"rejected", &RunStats::rejected},
    {"refused", &RunStats::refused},       {"plans", &RunStats::plans},
    {"reused", &RunStats::reused},         {"must_reuse", &RunStats::must_reuse},
    {"must_reuse_shared", &RunStats::must_reuse_shared},
    {"may_reuse", &RunStats::may_reuse},   {"builds", &RunStats::builds},
    {"rebinds", &RunStats::rebinds},       {"change_decodes", &RunStats::change_decodes},
    {"data_blind", &RunStats::data_blind}, {"independent_blind", &RunStats::independent_blind},
    {"blind_same_weights_reload", &RunStats::blind_same_weights_reload},
    {"twin_rows", &RunStats::twin_rows},   {"twin_within_tolerance", &RunStats::twin_within_tolerance},   {"reference_rows", &RunStats::reference_rows},
    {"peer_rows", &RunStats::peer_rows},   {"peer_reused", &RunStats::peer_reused},
    {"peer_builds", &RunStats::peer_builds}, {"peer_rebinds", &RunStats::peer_rebinds},
    {"reuse_more", &RunStats::reuse_more}, {"reuse_fewer", &RunStats::reuse_fewer},
    {"prepared_otherwise", &RunStats::prepared_otherwise},
    {"routing_tie_rows", &RunStats::routing_tie_rows},
    {"fresh_rows", &RunStats::fresh_rows}, {"fresh_unjudged", &RunStats::fresh_unjudged},
    {"memory_refused", &RunStats::memory_refused},
};

nlohmann::json oracles_json(const OracleReport& o) {
    return {{"data", true},
            {"accounting", o.accounting},
            {"plan_identity", o.plan_identity},
            {"kv", o.kv},
            {"weld", o.weld},
            {"blocks", o.blocks},
            {"white_box", o.white_box},
            {"twin", o.twin},
            {"fresh", o.fresh},
            {"peer", o.peer},
            {"unavailable",
             {{"accounting", o.accounting_why_not},
              {"plan_identity", o.plan_identity_why_not},
              {"kv", o.kv_why_not},
              {"weld", o.weld_why_not},
              {"blocks", o.blocks_why_not},
              {"white_box", o.white_box_why_not},
              {"twin", o.twin_why_not},
              {"fresh", o.fresh_why_not}}}};
}

OracleReport oracles_from_json(const nlohmann::json& j) {
    OracleReport o;
    o.accounting = json_field<bool>(j, "accounting");
    o.plan_identity = json_field<bool>(j, "plan_identity");
    o.kv = json_field<bool>(j, "kv");
    o.weld = json_field<bool>(j, "weld");
    o.blocks = json_field<bool>(j, "blocks");
    o.white_box = json_field<bool>(j, "white_box");
    o.twin = json_field<bool>(j, "twin");
    o.peer = j.contains("peer") && json_field<bool>(j, "peer");
    o.fresh = json_field<bool>(j, "fresh");
    const nlohmann::json& why = j.at("unavailable");
    o.accounting_why_not = json_field<std::string>(why, "accounting");
    o.plan_identity_why_not = json_field<std::string>(why, "plan_identity");
    o.kv_why_not = json_field<std::string>(why, "kv");
    o.weld_why_not = json_field<std::string>(why, "weld");
    o.blocks_why_not = json_field<std::string>(why, "blocks");
    o.white_box_why_not = json_field<std::string>(why, "white_box");
    o.twin_why_not = json_field<std::string>(why, "twin");
    o.fresh_why_not = json_field<std::string>(why, "fresh");
    return o;
}

// The fields every shard of one serving campaign must share.
constexpr const char* kIdentity[] = {"format", "version", "build", "range", "steps", "model", "engine"};

}  // namespace

nlohmann::json json_report(const RunResult& r) {
    nlohmann::json stats = nlohmann::json::object();
    for (const auto& c : kCounts) stats[c.name] = r.stats.*c.field;
    for (int k = 0; k < kOpKinds; ++k) stats["ops_by_kind"][std::string(to_string(OpKind(k)))] = r.stats.ops_by_kind[std::size_t(k)];
    stats["variants"] = r.stats.variants;
    stats["max_logit_error"] = r.stats.max_logit_error;
    stats["max_kv_error"] = r.stats.max_kv_error;
    stats["max_peer_error"] = r.stats.max_peer_error;
    stats["max_fresh_error"] = r.stats.max_fresh_error;
    nlohmann::json j = {{"seed", r.config.seed},          {"config", r.config}, {"steps", r.steps},
                        {"verdict", to_string(r.verdict)}, {"oracles", oracles_json(r.oracles)}, {"stats", stats}};
    if (r.failure) j["failure"] = failure_json(*r.failure);
    if (!r.known_finding.empty()) j["known_finding"] = r.known_finding;
    if (!r.steered_past.empty()) j["steered_past"] = r.steered_past;
    return j;
}

RunResult run_result_from_json(const nlohmann::json& j) {
    RunResult r;
    r.config = config_from_json(j.at("config"));
    r.steps = json_field<int>(j, "steps");
    r.verdict = verdict_from_string(json_field<std::string>(j, "verdict"));
    r.oracles = oracles_from_json(j.at("oracles"));
    const nlohmann::json& stats = j.at("stats");
    for (const auto& c : kCounts) r.stats.*c.field = json_field<std::uint64_t>(stats, c.name);
    const nlohmann::json& kinds = stats.at("ops_by_kind");
    for (int k = 0; k < kOpKinds; ++k)
        r.stats.ops_by_kind[std::size_t(k)] = json_field<std::uint64_t>(kinds, std::string(to_string(OpKind(k))).c_str());
    if (stats.contains("variants"))
        r.stats.variants = json_field<std::map<std::string, std::uint64_t>>(stats, "variants");
    r.stats.max_logit_error = json_field<double>(stats, "max_logit_error");
    r.stats.max_kv_error = json_field<double>(stats, "max_kv_error");
    r.stats.max_peer_error = json_field<double>(stats, "max_peer_error");
    r.stats.max_fresh_error = json_field<double>(stats, "max_fresh_error");
    if (j.contains("failure")) r.failure = failure_from_json(j.at("failure"));
    if (j.contains("known_finding")) r.known_finding = json_field<std::string>(j, "known_finding");
    if (j.contains("steered_past")) r.steered_past = json_field<std::vector<std::string>>(j, "steered_past");
    return r;
}

nlohmann::json swarm_json(const SwarmResult& r, const SwarmOptions& o, std::uint64_t range_first,
                                std::uint64_t range_last, Shard shard) {
    nlohmann::json seeds = nlohmann::json::array();
    for (const RunResult& s : r.seeds) seeds.push_back(json_report(s));
    nlohmann::json j = swarm_header(kSwarmFormat, range_first, range_last, shard, o.first, o.last, o.steps);
    j["model"] = o.model;
    j["engine"] = {{"name", o.engine.engine}, {"build", targets::engine_build(o.engine.engine)},
                   {"params", o.engine.params}, {"faults", o.engine.faults},
                   {"seqs", o.engine.seqs},   {"n_ctx", o.engine.n_ctx}};
    j["failures"] = r.failures;
    j["known_findings"] = {{"file", r.known_path}, {"known", r.known}, {"unreproduced", r.unreproduced}};
    j["seeds"] = std::move(seeds);
    return j;
}

Merged merge_reports(const std::vector<std::pair<std::string, nlohmann::json>>& reports) {
    Merged m;
    m.report = merge_shards(reports, kIdentity);
    const nlohmann::json& e = m.report.at("engine");
    m.options.first = json_field<std::uint64_t>(m.report.at("range"), "first");
    m.options.last = json_field<std::uint64_t>(m.report.at("range"), "last");
    m.options.steps = json_field<int>(m.report, "steps");
    m.options.model = json_field<std::string>(m.report, "model");
    m.options.engine = {json_field<std::string>(e, "name"), json_field<std::string>(e, "params"),
                        json_field<std::string>(e, "faults"), json_field<int>(e, "seqs"), json_field<int>(e, "n_ctx")};
    for (const nlohmann::json& s : m.report.at("seeds")) {
        m.result.seeds.push_back(run_result_from_json(s));
        m.result.total.add(m.result.seeds.back().stats);
        const RunResult& seed = m.result.seeds.back();
        m.result.failures += seed.verdict != Verdict::pass || !seed.steered_past.empty();
        m.result.known += !seed.known_finding.empty();
        m.result.steered += !seed.steered_past.empty();
    }
    require(!m.result.seeds.empty(), "merge: the reports hold no seeds");
    // Every shard checked the same findings file on the same build.
    const nlohmann::json& known = reports.front().second.at("known_findings");
    m.result.known_path = json_field<std::string>(known, "file");
    m.result.unreproduced = json_field<std::vector<std::string>>(known, "unreproduced");
    m.report["known_findings"]["known"] = m.result.known;
    m.result.oracles = m.result.seeds.front().oracles;
    m.report["failures"] = m.result.failures;
    return m;
}

nlohmann::json mutants_json(const MutantsResult& r, const MutantsOptions& o) {
    nlohmann::json rows = nlohmann::json::array();
    for (const MutantRow& row : r.rows) {
        nlohmann::json j = {{"fault", row.fault},
                            {"declared_classes", row.expected ? row.expected->describe() : ""},
                            {"killed", row.killed()},
                            {"outcomes", outcomes_json(row.by_verdict)},
                            {"caught_first_by", caught_by(row)}};
        if (row.first_seed) j["first_seed"] = *row.first_seed;
        if (row.outside_seed) j["outside_seed"] = *row.outside_seed;
        if (row.failure) j["failure"] = failure_json(*row.failure);
        rows.push_back(std::move(j));
    }
    return {{"engine", o.engine.engine}, {"params", o.engine.params}, {"seeds", o.seeds},    {"steps", o.steps},
            {"model", o.model},          {"clean_failures", r.clean.failures},               {"rows", rows},
            {"until_killed", o.until_killed},
            {"oracles", oracles_json(r.clean.oracles)},                                     {"verdict", r.ok() ? "PASS" : "FAIL"}};
}

}  // namespace kvweld::sim
