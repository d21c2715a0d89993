#include "sim/shard.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "sim/json_field.hpp"
#include "sim/report.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>

#ifndef KVWELD_GIT_COMMIT
#define KVWELD_GIT_COMMIT "unknown"
#endif

namespace kvweld::sim {

namespace {

constexpr const char* kFormat = "kvweld-swarm";
constexpr int kVersion = 1;

std::optional<std::uint64_t> number(std::string_view t) {
    std::uint64_t v = 0;
    const auto [end, err] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || err != std::errc() || end != t.data() + t.size()) return std::nullopt;
    return v;
}

nlohmann::json oracles_json(const OracleSwitches& o) {
    return {{"data", o.data}, {"kv", o.kv}, {"weld", o.weld}, {"accounting", o.accounting}};
}

std::vector<std::string> fault_list(const FaultSet& faults) {
    std::vector<std::string> out;
    for (const FaultInfo& f : all_faults())
        if (faults.has(f.fault)) out.emplace_back(f.name);
    return out;
}

RunStats stats_from_json(const nlohmann::json& j) {
    RunStats s;
    s.ops_run = json_field<std::uint64_t>(j, "ops_run");
    s.ops_skipped = json_field<std::uint64_t>(j, "ops_skipped");
    s.requests = json_field<std::uint64_t>(j, "requests");
    s.decodes = json_field<std::uint64_t>(j, "decodes");
    s.kept = json_field<std::uint64_t>(j, "kept");
    s.rebound = json_field<std::uint64_t>(j, "rebound");
    s.rebuilt = json_field<std::uint64_t>(j, "rebuilt");
    const nlohmann::json& just = j.at("justified");
    s.justified_kept = json_field<std::uint64_t>(just, "kept");
    s.justified_rebinds = json_field<std::uint64_t>(just, "rebind");
    s.justified_builds = json_field<std::uint64_t>(just, "build");
    s.capacity_rebuilds = json_field<std::uint64_t>(just, "capacity_rebuilds");
    s.spurious = json_field<std::uint64_t>(j, "spurious");
    s.missed = json_field<std::uint64_t>(j, "missed");
    s.change_decodes = json_field<std::uint64_t>(j, "change_decodes");
    s.data_blind = json_field<std::uint64_t>(j, "data_blind");
    s.independent_blind = json_field<std::uint64_t>(j, "independent_blind");
    s.blind_same_weights_reload = json_field<std::uint64_t>(j, "blind_same_weights_reload");
    s.max_logit_error = json_field<double>(j, "max_logit_error");
    s.max_kv_error = json_field<double>(j, "max_kv_error");
    return s;
}

SeedResult seed_from_json(const nlohmann::json& j) {
    SeedResult s;
    s.config = config_from_json(j.at("config"));
    s.stats = stats_from_json(j);
    s.verdict = verdict_from_string(json_field<std::string>(j, "verdict"));
    if (j.contains("failure")) s.failure = failure_from_json(j.at("failure"));
    return s;
}

// The fields every shard of one campaign must share.
constexpr const char* kIdentity[] = {"format", "version", "build", "range", "steps", "model", "backend", "faults",
                                     "oracles"};

}  // namespace

Shard parse_shard(std::string_view text) {
    const auto slash = text.find('/');
    const auto i = slash == std::string_view::npos ? std::nullopt : number(text.substr(0, slash));
    const auto n = slash == std::string_view::npos ? std::nullopt : number(text.substr(slash + 1));
    require(i && n && *n >= 1 && *i < *n, "--shard '", text, "': expected i/n with 0 <= i < n, e.g. 3/16");
    return {*i, *n};
}

std::pair<std::uint64_t, std::uint64_t> shard_range(std::uint64_t first, std::uint64_t last, Shard s) {
    const std::uint64_t len = last - first + 1;
    require(s.count <= len, "--shard ", s.index, "/", s.count, ": the range ", first, "..", last, " has only ", len,
            " seeds, fewer than the ", s.count, " shards");
    // len <= 1e8 (the swarm's limit) and count <= len: no overflow.
    return {first + s.index * len / s.count, first + (s.index + 1) * len / s.count - 1};
}

std::string build_id() {
    return cat("kvweld ", KVWELD_GIT_COMMIT, kFaultsCompiled ? " faults" : " no-faults");
}

nlohmann::json swarm_header(const char* format, std::uint64_t range_first, std::uint64_t range_last, Shard shard,
                            std::uint64_t first, std::uint64_t last, int steps) {
    return {{"format", format},
            {"version", kVersion},
            {"build", build_id()},
            {"range", {{"first", range_first}, {"last", range_last}}},
            {"shard", {{"index", shard.index}, {"count", shard.count}, {"first", first}, {"last", last}}},
            {"steps", steps}};
}

std::string report_format(const nlohmann::json& report) {
    return report.is_object() && report.contains("format") && report.at("format").is_string()
               ? report.at("format").get<std::string>()
               : "";
}

nlohmann::json swarm_json(const SwarmResult& r, const SwarmOptions& o, std::uint64_t range_first,
                          std::uint64_t range_last, Shard shard) {
    nlohmann::json seeds = nlohmann::json::array();
    for (const SeedResult& s : r.seeds) seeds.push_back(json_report(RunResult{s.config, o.steps, o.oracles, {}, s.stats, s.verdict, s.failure}));
    nlohmann::json j = swarm_header(kFormat, range_first, range_last, shard, o.first, o.last, o.steps);
    j["model"] = o.draw.model;
    j["backend"] = to_string(o.draw.backend);
    j["faults"] = fault_list(o.draw.faults);
    j["oracles"] = oracles_json(o.oracles);
    j["failures"] = r.failures;
    j["seeds"] = seeds;
    return j;
}

Merged merge_reports(const std::vector<std::pair<std::string, nlohmann::json>>& reports) {
    const nlohmann::json merged = merge_shards(reports, kIdentity);
    Merged m;
    m.options.first = json_field<std::uint64_t>(merged.at("range"), "first");
    m.options.last = json_field<std::uint64_t>(merged.at("range"), "last");
    m.options.steps = json_field<int>(merged, "steps");
    m.options.draw.model = json_field<std::string>(merged, "model");
    m.options.draw.backend = backend_from_string(json_field<std::string>(merged, "backend"));
    const nlohmann::json& oracles = merged.at("oracles");
    m.options.oracles = {json_field<bool>(oracles, "data"), json_field<bool>(oracles, "kv"),
                         json_field<bool>(oracles, "weld"), json_field<bool>(oracles, "accounting")};
    for (const nlohmann::json& s : merged.at("seeds")) {
        m.result.seeds.push_back(seed_from_json(s));
        m.result.total.add(m.result.seeds.back().stats);
        m.result.failures += m.result.seeds.back().verdict != Verdict::pass;
    }
    m.report = merged;
    m.report["failures"] = m.result.failures;
    return m;
}

nlohmann::json merge_shards(const std::vector<std::pair<std::string, nlohmann::json>>& reports,
                            std::span<const char* const> identity) {
    require(!reports.empty(), "merge: no reports given");
    const auto& [first_name, first] = reports.front();
    const std::string format = report_format(first);
    for (const auto& [name, j] : reports) {
        require(!format.empty() && report_format(j) == format, "merge: ", name, " is not a kvweld swarm report",
                format.empty() ? "" : cat(" of the first one's kind (", format, ")"));
        for (const char* field : identity)
            require(j.contains(field) && j.at(field) == first.at(field), "merge: ", name, " and ", first_name,
                    " differ in '", field, "' (", j.contains(field) ? j.at(field).dump() : "missing", " vs ",
                    first.at(field).dump(), "): they are not shards of one campaign");
    }
    const auto count = json_field<std::uint64_t>(first.at("shard"), "count");
    const auto range_first = json_field<std::uint64_t>(first.at("range"), "first");
    const auto range_last = json_field<std::uint64_t>(first.at("range"), "last");
    std::vector<const nlohmann::json*> by_index(count, nullptr);
    for (const auto& [name, j] : reports) {
        const nlohmann::json& s = j.at("shard");
        const auto n = json_field<std::uint64_t>(s, "count"), i = json_field<std::uint64_t>(s, "index");
        require(n == count && i < n, "merge: ", name, " is shard ", i, "/", n, " but ", first_name, " says ", count,
                " shards");
        require(by_index[i] == nullptr, "merge: shard ", i, "/", n, " is given twice (", name, ")");
        const auto [lo, hi] = shard_range(range_first, range_last, {i, n});
        const nlohmann::json& seeds = j.at("seeds");
        bool own = seeds.is_array() && seeds.size() == hi - lo + 1;
        for (std::size_t k = 0; own && k < seeds.size(); ++k) own = seeds[k].value("seed", ~0ull) == lo + k;
        require(own, "merge: ", name, " does not hold exactly the seeds ", lo, "..", hi, " of shard ", i, "/", n);
        by_index[i] = &j;
    }
    for (std::uint64_t i = 0; i < count; ++i)
        require(by_index[i] != nullptr, "merge: shard ", i, "/", count, " is missing");
    nlohmann::json seeds = nlohmann::json::array();
    for (const nlohmann::json* shard : by_index)
        for (const nlohmann::json& s : shard->at("seeds")) seeds.push_back(s);
    nlohmann::json merged = first;
    merged["shard"] = {{"index", 0}, {"count", 1}, {"first", range_first}, {"last", range_last}};
    merged["seeds"] = std::move(seeds);
    return merged;
}

}  // namespace kvweld::sim
