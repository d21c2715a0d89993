// Known findings: failures of one engine release that are bugs in that
// engine, not in kvweld, each minimized and traced to the engine's source.
// A real bug must neither turn CI red forever nor be hidden: a swarm
// reports a failure that matches a known finding as such (its own count,
// never a pass), still fails on anything new, and fails when a known
// finding's trace stops reproducing (a fixed engine is noticed, and its
// entry must go).
//
// The file (one per engine release, JSON): {"format":
// "kvweld-known-findings", "version": 1, "engine", "release", "findings":
// [{"id", "class" (a verdict), optionally "also" (more verdicts it may show
// as first), "clause", "trace" (the minimized trace, a
// path relative to the file), "source" (the engine source line it traces
// to), "explanation" (one line), optionally "repro_truth" (the ground truth
// kvweld repro writes its program with: targets/repro.hpp) and the report's
// hand-written parts, "title", "kind", "server", "fix", "newest_source"
// (what was read or built of the newest source: scripts/finding-reports),
// "upstream" (sim/upstream.hpp), "program" and "sheet"}]}. Each trace runs on the engine the file
// names, so a release's file may list another release's traces (the
// releases of llama.cpp that share 0.3.36's findings: their files name
// llamacpp@V and each source line as read in that release). A failure matches a finding when its
// class is the finding's and the reuse rule's contract clause that decided
// the failing call (Failure::clause) is the finding's: the rule names the
// clause (e.g. "adapters-unchanged"), never the finding.
#pragma once

#include "sim/run.hpp"
#include "sim/upstream.hpp"

#include <optional>
#include <string>
#include <vector>

namespace kvweld::sim {

struct KnownFinding {
    std::string id;
    Verdict verdict = Verdict::pass;
    std::string clause;
    std::string trace;  // absolute, resolved against the file's folder
    std::string source;
    std::string explanation;
    std::string repro_truth;  // optional: the ground truth its reproducer needs (kvweld repro --truth)
    // Optional: its checked fix, a patch of the engine's source (a path from
    // the repository root). A build with the fixes (llamacpp@bN+fixes) has
    // every finding of bN's file but those with one.
    std::string patch;
    // Optional: other classes the same bug may show as first, where the
    // oracle that sees it first depends on the run (a row judged by its
    // sampled token, not its logits, leaves a stale graph to the accounting).
    std::vector<Verdict> also;
    // Optional: how a swarm steers a seed around the finding's precondition
    // once it has met it ("steer" in the file: op kinds never drawn, engine
    // settings fixed), so the rest of the seed is still judged.
    std::vector<OpKind> steer_ops;
    std::string steer_params;  // k=v,... set over the drawn ones
    bool steerable() const { return !steer_ops.empty() || !steer_params.empty(); }
    // Optional ("upstream", sim/upstream.hpp): what upstream already knows.
    // A release's file that lists the pinned release's findings leaves it to
    // the pinned file, where each fact is kept once.
    std::optional<Upstream> upstream;
    // Optional, from the repository root: the finding's standalone program
    // and its data sheet (scripts/finding-reports writes both).
    std::string program, sheet;
    // Optional ("needs": "arch=mamba|lfm2"): the engine setting without
    // which no seed can meet it; --require-coverage asks it of a swarm only
    // where that setting is given one of those values.
    std::string needs;
    // Whether a swarm given `params` can meet it (needs, above).
    bool reachable(const std::string& params) const;
};

struct KnownFindings {
    std::string path;  // "" when none were loaded
    std::string engine, release;
    std::vector<KnownFinding> findings;
    // The finding `r`'s failure is, or nullptr (a pass, or a new failure).
    const KnownFinding* match(const RunResult& r) const;
};

// `c` steered around `f`'s precondition: its ops never drawn, its settings
// set (a drawn setting of the same name replaced).
SimConfig steered(SimConfig c, const KnownFinding& f);
// The findings named in `ids` ("a,b"), each with a steer; throws Error
// naming an unknown id or one without a steer.
std::vector<const KnownFinding*> steers_named(const KnownFindings& known, const std::string& ids);

// Throws Error naming the file and the field when it is not one.
KnownFindings load_known_findings(const std::string& path);
// The findings `engine` runs with: `choice` "" is the registry's file for
// it (none for an engine without one; for a release V+fixes, V's findings
// without a patch), "none" none, else a path.
KnownFindings known_findings_for(const std::string& engine, const std::string& choice);

// Each finding's trace replayed on this build: a line per finding that no
// longer fails as recorded (its class and clause), naming what it did.
std::vector<std::string> unreproduced(const KnownFindings& known);

}  // namespace kvweld::sim
