// kvweld repro: a shrunk trace as a standalone program against the engine's
// own API (targets/repro.hpp). The trace is replayed on the engine, with an
// observer that hands each op and each call the engine is given to the
// engine's ReproWriter; the program then makes the same calls, beside a
// ground truth made without the suspected mechanism, and exits 1 when the
// finding shows. The ground truth a finding needs is its findings file's
// (`repro_truth`: sim/known_findings.hpp), or given.
#pragma once

#include "sim/known_findings.hpp"
#include "sim/run.hpp"

#include <optional>
#include <string>

namespace kvweld::sim {

struct Repro {
    std::string source;
    int call_lines = 0;    // lines of API calls in its ops
    std::string truth;     // the ground truth it was written with
    std::string title;
    RunResult replay;      // the trace's own verdict, replayed while writing
};

// `truth` "": the finding's (the entry of a findings file beside the trace
// that names it), else graph_reuse=0 (a twin with plan reuse off).
// Throws Error when the engine has no writer or a call has no mapping.
// `upstream_test`: the program as a test in the engine's own tree (llama.cpp:
// tests/test-<id>.cpp, C++17, the newest llama.h alone).
Repro write_repro(const std::string& trace_path, const std::string& truth, const std::string& command,
                  bool upstream_test = false);

// The findings-file entry whose trace is `trace_path` (files *.json in its
// folder and the folder above), preferring the file of the trace's engine.
std::optional<KnownFinding> finding_of_trace(const std::string& trace_path, const std::string& engine);

}  // namespace kvweld::sim
