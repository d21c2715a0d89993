// Known findings of a llama-server release: failures the server swarm
// meets that are bugs in llama.cpp, each minimized to a trace, traced to
// the library finding it is (targets/llamacpp/known_findings: its source
// line, explanation and fix are there, in one place), and given its server
// script. As for the library: a failing seed that matches one is reported
// as that finding (never a pass), anything else still fails, and a finding
// whose trace no longer fails as recorded fails the swarm (a fixed server
// is noticed).
//
// A failure matches a finding when its verdict is the finding's, its oracle
// is one the finding lists, and the finding's precondition holds of the
// run: a check over the settings and the ops up to the failing one, in one
// table (server_known.cpp), so a finding is never matched on its message.
//
// The file (JSON): {"format": "kvweld-server-known-findings", "version": 1,
// "release", "library" (the library's findings file, from the repository
// root), "findings": [{"id", "verdict", "oracles", "precondition" (a name in
// the table), "trace" (relative to the file), "script" (from the repository
// root), and either "in": "library" (the id is the library finding's, whose
// entry holds its source lines, explanation and fix) or "in": "server" (a
// bug of llama-server's own code, described here: "title", "source",
// "explanation", "upstream" (sim/upstream.hpp), and "patch",
// docs/findings/server/<id>.patch, where it has a fix), and optionally
// "steer": {settings field: value, ...}]}.
#pragma once

#include "sim/server/server_run.hpp"
#include "sim/upstream.hpp"

#include <string>
#include <vector>

namespace kvweld::sim::server {

struct ServerKnownFinding {
    std::string id;
    ServerVerdict verdict = ServerVerdict::fail;
    std::vector<std::string> oracles;
    std::string precondition;
    std::string trace;   // absolute
    std::string script;  // from the repository root
    // "in": "server" (llama-server's own code) or "ggml" (met only through
    // the server: kvweld's library simulator does not reach it): its facts
    // are here. "library": the library finding of the same id has them.
    bool own_facts = false;
    std::string title, source, explanation, patch;  // own_facts: its facts
    Upstream upstream;                               // own_facts: what upstream knows (sim/upstream.hpp)
    // Optional ("steer"): settings fields that take a seed around the
    // precondition once it met the finding, by their JSON names (the
    // settings table's); the swarm runs the seed again with them, so the
    // rest of it is judged.
    nlohmann::json steer = nlohmann::json::object();
    bool steerable() const { return !steer.empty(); }
};

// `s` steered around `f`'s precondition: its steer's fields set over the drawn ones.
ServerSettings steered(const ServerSettings& s, const ServerKnownFinding& f);

struct ServerKnownFindings {
    std::string path;  // "" none loaded
    std::string release, library;
    std::vector<ServerKnownFinding> findings;
    const ServerKnownFinding* match(const ServerRunResult& r) const;  // nullptr: a pass or a new failure
};

// The preconditions' names, each with what it says (for --help and errors).
std::vector<std::pair<std::string, std::string>> server_preconditions();

// Throws Error naming the file and the field when it is not one.
ServerKnownFindings load_server_known_findings(const std::string& path);
// choice "": the pinned release's file (targets/llamaserver/known_findings/b11434.json);
// "fixed": its findings without a fix (a build with the checked fixes:
// a library finding's fix is its "patch" in the library's file, a server
// finding's its own); "none": none; else a path.
ServerKnownFindings server_known_findings_for(const std::string& choice);
// Each finding's trace replayed on `server`: a line per finding that no
// longer fails as recorded (its verdict, an oracle it lists, its precondition).
std::vector<std::string> server_unreproduced(const ServerKnownFindings& known, const std::string& server,
                                             const std::string& work_dir);

}  // namespace kvweld::sim::server
