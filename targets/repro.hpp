// A standalone reproducer of a trace (kvweld repro): a program an engine's
// maintainers build against the engine's public API alone, which makes the
// trace's calls and computes the ground truth itself. The simulator replays
// the trace and hands each op and each call the engine was given to the
// engine's ReproWriter (sim/repro.hpp); how a call reads in the engine's
// API lives with its adapter (targets/llamacpp/llamacpp_repro.cpp), named
// by its registry row (EngineEntry::repro). An engine without one says so.
#pragma once

#include "engine/model.hpp"
#include "targets/memory_call.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kvweld::targets {

// How the program decides what is right: a second engine instance made
// without the suspected mechanism, given every call but the skipped ops.
struct ReproTruth {
    std::string params;         // settings that differ from the engine's ("graph_reuse=0", "kv_unified=0")
    std::vector<int> skip;      // trace lines the ground truth does not run (a round trip that must change nothing)
    bool count_reuse = false;   // lost reuse: the engine must reuse as often as the ground truth does
    bool new_chains = false;    // where the engine changes a sampler chain in place, the ground truth sets a new one
    // engine.k=v: settings the program's engine context takes over the
    // trace's, where kvweld's plugin refuses them (a setting it guards
    // because the engine would abort the process: the trace runs without).
    std::string engine_params;
    std::string text;           // as given ("graph_reuse=0,skip=7+8")
};
// Parses "k=v,...,engine.k=v,...,skip=N+M,count-reuse,new-chains"; throws Error naming a bad part.
ReproTruth parse_repro_truth(const std::string& text);

struct ReproSetup {
    const ModelConfig* model;
    std::string params;   // the engine's settings, as the trace has them
    int n_ctx = 0, seqs = 0;
    std::string title;    // the finding, or the trace's name
    std::string command;  // the kvweld command that wrote it
    ReproTruth truth;
    // For llama.cpp's own tree (tests/test-<id>.cpp): C++17, its newest
    // llama.h's calls (llama_newest.hpp in place of llama_compat.hpp), and a
    // test's header; otherwise a reproducer for any cached release (C++20).
    bool upstream_test = false;
};

// One pair of a decode call as the engine was given it.
struct ReproPair {
    int seq, token, pos;
    bool output;
};

class ReproWriter {
public:
    virtual ~ReproWriter() = default;
    // Before the op on trace line `line`.
    virtual void op(int line) = 0;
    // A memory call or a decode the engine is given (before it answers).
    virtual void call(const MemoryCall& call) = 0;
    virtual void decode(std::span<const ReproPair> pairs) = 0;
    // ABI 12: the abort callback armed for the next decode (yes from its
    // `after`-th question on), and after a call it stopped, the positions
    // each of its sequences kept (its first tokens).
    virtual void abort(int after) = 0;
    virtual void aborted(const std::map<int, int>& lengths) = 0;
    // The program's source.
    virtual std::string finish() = 0;
    // Lines of API calls in its ops (the rest is the model and the checks).
    virtual int call_lines() const = 0;
};

}  // namespace kvweld::targets
