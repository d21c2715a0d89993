#include "sim/shard.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
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

constexpr int kVersion = 2;  // of every swarm report's header; 2: one simulator for every engine

std::optional<std::uint64_t> number(std::string_view t) {
    std::uint64_t v = 0;
    const auto [end, err] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || err != std::errc() || end != t.data() + t.size()) return std::nullopt;
    return v;
}

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
