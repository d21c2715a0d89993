// `kvweld swarm`: many seeds in parallel, a progress line, a closing table.
#include "cli/commands.hpp"

#include "sim/shard.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <optional>
#include <string_view>
#include <cstdio>
#include <fstream>
#include <thread>
#include <unistd.h>

namespace kvweld::cli {

using namespace kvweld::sim;

std::pair<std::uint64_t, std::uint64_t> parse_seed_range(const std::string& s) {
    const auto dots = s.find("..");
    const auto first = dots == std::string::npos ? std::nullopt : parse_u64(std::string_view(s).substr(0, dots));
    const auto last = dots == std::string::npos ? std::nullopt : parse_u64(std::string_view(s).substr(dots + 2));
    require(first && last, "--seeds '", s, "': expected A..B with unsigned integers, e.g. 0..299");
    require(*first <= *last, "--seeds '", s, "': the first seed ", *first, " is after the last ", *last);
    require(*last - *first < 100'000'000, "--seeds '", s, "': at most 100000000 seeds per swarm");
    return {*first, *last};
}

namespace {

struct SwarmArgs {
    RunOptions run;
    std::string seeds = "0..99";
    std::string shard = "0/1";
    int jobs = 0;
    std::string json;
    SwarmGates gates;
};

int run_swarm_cmd(const SwarmArgs& a) {
    const auto range = parse_seed_range(a.seeds);
    const int jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return run_swarm(a.run, {range.first, range.second, parse_shard(a.shard)}, jobs, a.json, a.gates);
}

int run_merge_cmd(const std::vector<std::string>& paths, const std::string& json) {
    std::vector<std::pair<std::string, nlohmann::json>> reports;
    for (const std::string& path : paths) {
        std::ifstream in(path);
        require(in.good(), "merge: cannot read ", path);
        nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        require(!j.is_discarded(), "merge: ", path, " is not valid JSON");
        reports.emplace_back(path, std::move(j));
    }
    require(!reports.empty(), "merge: no reports given");
    return run_merge(reports, json);
}

}  // namespace

void add_merge_command(CLI::App& app, std::function<int()>& action) {
    auto paths = std::make_shared<std::vector<std::string>>();
    auto json = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand(
        "merge", "Merge the JSON reports of every shard of one swarm (swarm --shard i/n --json) into the report "
                 "the unsharded run writes; prints its table and the reproduce command of every failure. "
                 "Exit 0 when every failure is a known finding of the engine (NO NEW FINDINGS) or none failed, 1 "
                 "on a new failure or a failed gate, 2 reports that are not the shards of one campaign");
    cmd->add_option("REPORTS", *paths, "the shards' JSON reports")->required();
    cmd->add_option("--json", *json, "write the merged report here");
    cmd->callback([paths, json, &action] { action = [paths, json] { return run_merge_cmd(*paths, *json); }; });
}

void add_swarm_command(CLI::App& app, std::function<int()>& action) {
    auto args = std::make_shared<SwarmArgs>();
    CLI::App* cmd = app.add_subcommand("swarm", "Many seeds in parallel; ends with a table, the reproduce command of "
                                                "every failure, and the known findings met (each with its seeds, a "
                                                "replay command, its trace, program, data sheet and upstream status). "
                                                "Exit 0 when every failure is a known finding of the engine (NO NEW "
                                                "FINDINGS) or none failed, 1 on a new failure or a failed gate");
    cmd->add_option("--seeds", args->seeds, "seed range A..B, inclusive")->capture_default_str();
    cmd->add_option("--shard", args->shard,
                    "run only shard i of n of the range (a contiguous block; merge the reports with kvweld merge)")
        ->capture_default_str();
    cmd->add_option("--jobs", args->jobs, "worker threads (default: all cores)")->check(CLI::Range(0, 1024));
    add_run_options(cmd, args->run);
    cmd->add_option("--json", args->json, "write every seed's report as JSON here");
    cmd->add_flag("--require-coverage", args->gates.coverage,
                  "fail where the swarm went blind: an op kind weighted in some seed that never ran, an argument "
                  "variant of a kind that ran that never took effect (the report's 'op variants' row), or a known "
                  "finding of the engine's file that no seed met");
    cmd->add_flag("--require-terms", args->gates.terms,
                  "fail when a term of the reuse condition the engine's API can reach was never exercised (the report's "
                  "'reuse terms' rows: per term, the plan pairs where it changed alone, with others, and held); with "
                  "--engine llama-server: an op variant never sent (the report's 'op variants sent' line) or a settings "
                  "field never drawn with a second value");
    cmd->add_flag("--no-steer", args->run.no_steer,
                  "a seed that meets a known finding stops there (default: it runs again steered around the "
                  "finding's precondition, the finding's 'steer' in its file, and the rest of it is judged)");
    cmd->callback([args, &action] { action = [args] { return run_swarm_cmd(*args); }; });
}

}  // namespace kvweld::cli
