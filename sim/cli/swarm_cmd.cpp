// `kvweld swarm`: many seeds in parallel, a progress line, a closing table.
#include "sim/cli/commands.hpp"

#include "sim/report.hpp"
#include "sim/swarm.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <chrono>
#include <optional>
#include <string_view>
#include <cstdio>
#include <thread>
#include <unistd.h>

namespace kvweld::cli {

using namespace kvweld::sim;

namespace {

struct SwarmArgs {
    RunOptions run;
    std::string seeds = "0..99";
    int jobs = 0;
    std::string json;
};

std::pair<std::uint64_t, std::uint64_t> parse_seed_range(const std::string& s) {
    const auto dots = s.find("..");
    const auto first = dots == std::string::npos ? std::nullopt : parse_u64(std::string_view(s).substr(0, dots));
    const auto last = dots == std::string::npos ? std::nullopt : parse_u64(std::string_view(s).substr(dots + 2));
    require(first && last, "--seeds '", s, "': expected A..B with unsigned integers, e.g. 0..299");
    require(*first <= *last, "--seeds '", s, "': the first seed ", *first, " is after the last ", *last);
    require(*last - *first < 100'000'000, "--seeds '", s, "': at most 100000000 seeds per swarm");
    return {*first, *last};
}

int run_swarm_cmd(const SwarmArgs& a) {
    SwarmOptions o;
    std::tie(o.first, o.last) = parse_seed_range(a.seeds);
    o.jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    o.steps = a.run.steps;
    o.draw = draw_options(a.run);
    const std::size_t total = static_cast<std::size_t>(o.last - o.first) + 1;
    std::printf("swarm: seeds %llu..%llu (%zu), %d steps each, %d jobs, backend %s, faults %s\n",
                static_cast<unsigned long long>(o.first), static_cast<unsigned long long>(o.last), total,
                o.steps, o.jobs, std::string(to_string(o.draw.backend)).c_str(), o.draw.faults.describe().c_str());
    std::fflush(stdout);

    const bool tty = isatty(STDERR_FILENO);
    const auto start = std::chrono::steady_clock::now();
    auto progress = [&](std::size_t done, std::size_t failures) {
        if (!tty) return;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "\r[swarm] %zu/%zu seeds  %.1f seeds/s  %zu failures   ", done, total,
                     done / std::max(secs, 1e-9), failures);
    };
    const SwarmResult r = run_swarm(o, progress);
    if (tty) std::fprintf(stderr, "\n");
    const std::string table = swarm_table(r, o);
    std::fwrite(table.data(), 1, table.size(), stdout);

    if (!a.json.empty()) {
        nlohmann::json seeds = nlohmann::json::array();
        for (const SeedResult& s : r.seeds) {
            RunResult rr{s.config, o.steps, o.oracles, {}, s.stats, s.verdict, s.failure};
            seeds.push_back(json_report(rr));
        }
        write_json(a.json, {{"first", o.first}, {"last", o.last}, {"steps", o.steps},
                            {"failures", r.failures}, {"seeds", seeds}});
    }
    return r.failures == 0 ? 0 : 1;
}

}  // namespace

void add_swarm_command(CLI::App& app, std::function<int()>& action) {
    auto args = std::make_shared<SwarmArgs>();
    CLI::App* cmd = app.add_subcommand("swarm", "Many seeds in parallel; ends with a table and the reproduce "
                                                "command of every failure. Exit 0 all pass, 1 any failure");
    cmd->add_option("--seeds", args->seeds, "seed range A..B, inclusive")->capture_default_str();
    cmd->add_option("--jobs", args->jobs, "worker threads (default: all cores)")->check(CLI::Range(0, 1024));
    add_run_options(cmd, args->run);
    cmd->add_option("--json", args->json, "write every seed's report as JSON here");
    cmd->callback([args, &action] { action = [args] { return run_swarm_cmd(*args); }; });
}

}  // namespace kvweld::cli
