// kvweld diff: two builds of an engine (two releases, two settings, two
// plugins, an engine and itself with a fault switch) run on the same seeds,
// ops and tokens in lockstep (the peer oracle, sim/oracle_peer.cpp), with
// no reuse rule and no reference: every call where they prepared their
// plans differently and every row where they disagree past the tolerance,
// each with the command that reproduces it and, for the first seed of each
// kind of difference, a shrunk trace.
#pragma once

#include "sim/run.hpp"

#include <functional>
#include <string>
#include <vector>

namespace kvweld::sim {

struct DiffOptions {
    SwarmOptions swarm;      // engine: the first engine, its peer in engine.peer
    std::string traces_dir;  // where the shrunk traces go ("": none written)
    int shrink_runs = 400;   // runs each shrink may take (0: no shrink)
    int max_shrinks = 8;     // kinds of difference shrunk (the first seed of each: verdict, op, who reused more)
};

struct DiffResult {
    SwarmResult swarm;
    std::size_t rows_differ = 0, reuse_differs = 0, other = 0;  // seeds by how they ended
    std::size_t both_refused = 0;  // of the seeds that did not differ, those both engines stopped on (the same refusal)
    std::vector<ShrunkTrace> shrunk;
    bool same() const { return swarm.failures == 0; }
};

// Throws Error for a bad engine, setting or fault (before any seed runs).
// progress(done, failures) as the seeds run; note(line) before each shrink.
DiffResult run_diff(const DiffOptions& options, const std::function<void(std::size_t, std::size_t)>& progress = {},
                    const std::function<void(const std::string&)>& note = {});
std::string diff_table(const DiffResult& r, const DiffOptions& options);

}  // namespace kvweld::sim
