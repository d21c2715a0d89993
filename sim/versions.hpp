// kvweld versions: one engine's releases side by side (llama.cpp's, each
// built by scripts/setup-llama --version V into the cache and opened as
// llamacpp@V). Per release: the swarm with the twin and the reference on
// (the reuse rule only where it states that release's facts), the steady
// serving traffic's reuse in each KV layout, and kvweld diff against the
// release before it; the shrunk trace of every new finding.
#pragma once

#include "sim/diff.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kvweld::sim {

struct VersionsOptions {
    std::string engine = "llamacpp";  // the base engine; a release is engine@V
    std::vector<std::string> releases;  // in order, oldest first
    std::string pinned;                 // the release the plain engine name runs ("" none)
    std::uint64_t first = 0, last = 99;       // the swarm's seeds
    std::uint64_t diff_first = 0, diff_last = 29;  // diff's seeds
    int steps = 200;
    int jobs = 1;
    int traffic_ticks = 400;
    std::string traces_dir = "kvweld-versions";
    int shrink_runs = 300;
    int max_shrinks = 40;  // new failing seeds shrunk per release (the rest are counted, not classified)
    // The steady traffic's server shapes (slots x speculative k), each in
    // both KV layouts; the first is the table's column.
    std::vector<std::pair<int, int>> grid = {{8, 4}, {64, 16}};
};

// The engine name that runs `release`: the plain name for the pinned one.
std::string release_engine(const VersionsOptions& o, const std::string& release);

struct SteadyReuse {
    int slots = 0, spec_k = 0;
    std::string layout;        // "kv_unified=0" or "kv_unified=1"
    bool ran = false;
    std::string why_not;       // when it did not
    std::uint64_t calls = 0, reused = 0;  // decode calls, graphs reused (the engine's count)
    // The rule's account of the same calls where it states the release's
    // facts (judged): reuses it required, and allowed without requiring.
    bool judged = false;
    std::uint64_t must_reuse = 0, may_reuse = 0;
    std::string may_why;  // RunStats::may_reuse_why_text: why the rule could not require the may_reuse
    double ideal_per_call() const { return calls ? double(must_reuse) / double(calls) : 0.0; }
    std::map<std::string, ShapeStats> shapes;  // per batch shape, the engine's counts
    double per_call() const { return calls ? double(reused) / double(calls) : 0.0; }
};
// The traffic command that runs one steady point on `engine`.
std::string steady_command(const VersionsOptions& o, const std::string& engine, const SteadyReuse& s);

// A new kind of failure: every new failing seed is shrunk, and seeds whose
// shrunk traces end the same way (class and oracle) with the same kinds of
// op are one kind (where no rule names a clause, the ops are what tell a
// context shift's finding from an adapter's).
struct NewFinding {
    ShrunkTrace first;         // the first seed's shrunk trace
    std::string ops;           // the kinds of op in it, "admit cvec retire step"
    std::vector<std::uint64_t> seeds;  // every seed of this kind
};

struct ReleaseRow {
    std::string release, engine, build;
    std::string rule_gap;  // why the reuse rule was not applied ("": it was)
    SwarmResult swarm;
    std::vector<NewFinding> findings;   // the new kinds of failure (the first max_shrinks new failing seeds)
    SteadyReuse separate, unified;      // kv_unified=0 and 1, at the grid's first point
    std::vector<SteadyReuse> steady;    // every grid point, each layout
    std::optional<DiffResult> diff;     // against the release before it
};

// Runs every release (each plugin must be built); line(text) reports each
// step, seeds(done, total) the seeds of the step under way.
std::vector<ReleaseRow> run_versions(const VersionsOptions& options,
                                     const std::function<void(const std::string&)>& line = {},
                                     const std::function<void(std::size_t, std::size_t)>& seeds = {});
std::string versions_table(const std::vector<ReleaseRow>& rows, const VersionsOptions& options);
bool versions_ok(const std::vector<ReleaseRow>& rows);  // no new finding on any release

}  // namespace kvweld::sim
