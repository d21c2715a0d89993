// Running the simulator: from a seed (ops drawn as the run goes) or
// from recorded ops (replay, shrink); traces; many seeds (swarm); shrinking.
// Same config and ops, same result, whatever the engine's speed.
#pragma once

#include "sim/simulator.hpp"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvweld::sim {

struct RunResult {
    SimConfig config;
    int steps = 0;
    std::vector<Op> ops;  // ops run, the failing one last
    RunStats stats;
    OracleReport oracles;
    Verdict verdict = Verdict::pass;
    std::optional<Failure> failure;
    std::string known_finding = {};  // a swarm's: the known finding the failure is (sim/known_findings.hpp)
    std::vector<ReuseDiff> reuse_diffs = {};  // kvweld diff: the calls the two engines prepared differently (the first few)
    std::string ended_early = {};             // kvweld diff: both engines refused a call there (the run stopped)
    // A swarm's: the known findings the seed met and was steered around, in
    // order (each a run of its own; this result is the last, its stats all
    // of them together).
    std::vector<std::string> steered_past = {};
};

// An engine that cannot be created (a broken plugin, a bad setting) throws Error.
RunResult run_generated(const SimConfig& config, int steps, bool checked = true);
// `before`: called with the simulator before the first op (a tool adds its observer).
RunResult run_ops(const SimConfig& config, const std::vector<Op>& ops, int steps,
                  const std::function<void(Simulator&)>& before = {});

// Traces: JSON Lines, a header (format "kvweld-trace", version, steps,
// config) then one op per line. A corrupt one throws Error naming the line.
// Version 3: one simulator for every engine (capacities and recycling
// admits, migrate); a trace of an older version or of the old second format
// ("kvweld-serve-trace") is refused (its seeds drew other ops), naming both
// versions.
inline constexpr const char* kTraceFormat = "kvweld-trace";
inline constexpr int kTraceVersion = 3;
struct Trace {
    SimConfig config;
    int steps = 0;
    std::vector<Op> ops;
};
std::string trace_text(const RunResult& r);
Trace parse_trace(const std::string& text, const std::string& origin = "<trace>");

struct ShrinkResult {
    std::vector<Op> ops;
    RunResult result;
    int runs = 0;
};
// What a candidate must keep of the original failure: its identity
// (verdict, oracle, clause, kind of message: FailureIdentity), or only its
// verdict (which may slip to another bug of the same class on the way).
enum class ShrinkKeep { identity, verdict };
ShrinkResult shrink(const SimConfig& config, const std::vector<Op>& ops, int steps, Verdict target,
                    int max_runs = 2000, ShrinkKeep keep = ShrinkKeep::identity);

// A failing seed run again with its ops kept and shrunk (at most max_runs
// runs) to the fewest ops that end the same way; the trace written to
// `path` ("": not written).
struct ShrunkTrace {
    std::uint64_t seed = 0;
    Verdict verdict = Verdict::pass;
    std::size_t ops_before = 0, ops_after = 0;
    std::string path;
    std::optional<Failure> failure;  // the shrunk trace's
};
ShrunkTrace shrink_seed(const SimConfig& config, int steps, int max_runs, const std::string& path);

// What a serving run or swarm prints: the verdict last.
std::string text_report(const RunResult& r);
// Its pieces a swarm's table shares: the stats' rows, the verdict's line
// ("verdict: FAIL ..."), and items joined by sep.
std::string stats_rows(const RunStats& s, const OracleReport& oracles);
std::string failure_line(const RunResult& r);
std::string join_list(const std::vector<std::string>& items, std::string_view sep);
// kvweld diff: the rows compared and what each engine prepared (A, B).
std::string peer_rows(const RunStats& s, const OracleReport& oracles);
// kvweld diff: one line per call of `r` the two engines prepared
// differently (at most `most`, then how many more).
std::string reuse_diff_lines(const RunResult& r, std::size_t most);

struct SwarmOptions {
    std::uint64_t first = 0, last = 0;  // inclusive
    int jobs = 1;
    int steps = 200;
    EngineChoice engine;
    std::string model;  // "" = drawn per seed
    // Known findings (sim/known_findings.hpp): "" the engine's file in the
    // registry (if it has one), "none", or a file's path.
    std::string known_findings;
    // Fail when a term of the reuse condition the engine's API can reach
    // was never exercised (RunStats::terms): the swarm's ops miss a key part.
    bool require_terms = false;
    // Fail when the swarm went blind somewhere it could see: an op kind
    // weighted in some seed's config that never ran, an argument variant of
    // a kind that ran that never took effect (sim/ops.hpp Variant), or a
    // known finding of the engine's file that no seed met.
    bool require_coverage = false;
    // Seeds after the first seed with a new failure (one no known finding
    // matches) are not run: the kill matrix's --until-killed. The seeds are
    // handed out in order, so every seed before that one ran whatever the
    // jobs, and the result is the same for any number of them.
    bool stop_at_new_failure = false;
    // A seed that meets a known finding with a steer is run again steered
    // around it (at most kMaxSteers times), so the rest of it is judged.
    bool steer = true;
};
inline constexpr int kMaxSteers = 4;
// A known finding the swarm met: its seeds, the command that replays the
// first, and where its minimized trace, program and data sheet are.
struct FindingMet {
    std::string id;
    std::vector<std::uint64_t> seeds;
    std::string replay;                 // reruns the first seed up to the finding (--steer past the ones before)
    std::string trace;                  // the finding's minimized trace
    std::string program, sheet;         // from the repository root; "" where the file names none
    std::string upstream;               // Upstream::summary(); "" where the file says nothing
};

struct SwarmResult {
    std::vector<RunResult> seeds;  // in seed order, ops dropped
    RunStats total;
    std::size_t failures = 0;  // seeds that failed, known findings included
    std::size_t known = 0;     // of them, seeds whose failure is a known finding
    std::size_t steered = 0;   // seeds steered past a known finding (SwarmOptions::steer)
    std::string known_path;    // the known findings file ("" none)
    std::vector<FindingMet> met;  // the known findings met, in the file's order
    std::vector<std::string> unreproduced;  // known findings whose trace no longer fails as recorded
    std::vector<std::string> unexercised;   // with require_terms: the reuse terms never exercised
    std::vector<std::string> uncovered;     // with require_coverage: what never ran, took effect or was met
    OracleReport oracles;  // the first seed's (the same engine for all)
    // No new failure, and every known finding still reproduces: what CI gates on.
    bool ok() const { return failures == known && unreproduced.empty() && unexercised.empty() && uncovered.empty(); }
};
SwarmResult run_swarm(const SwarmOptions& options,
                                 const std::function<void(std::size_t, std::size_t)>& progress = {});
std::string swarm_table(const SwarmResult& r, const SwarmOptions& options);
// The command that reruns one seed alone.
std::string reproduce_command(const SimConfig& config, int steps);

}  // namespace kvweld::sim
