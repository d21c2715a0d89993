// One row of the registry (targets/registry.hpp): all that kvweld knows of
// an engine by name. Each engine's folder defines its own rows
// (targets/kvweld/kvweld_entries.hpp, targets/llamacpp/llamacpp_entry.hpp);
// the registry only lists them. A field left empty means "none": the
// oracle or study it feeds is then off, and says why.
#pragma once

#include "engine/model.hpp"
#include "targets/abi_lists.hpp"
#include "targets/block_model.hpp"
#include "targets/engine.hpp"
#include "targets/repro.hpp"
#include "targets/reuse_rule.hpp"
#include "util/cat.hpp"
#include "util/rng.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvweld::targets {

// One setting of the engine the reuse study (kvweld traffic) runs, and the
// setting of its twin that builds every plan ("" when there is none).
struct StudySetting {
    std::string params;
    std::string no_reuse;
    bool recycle = false;  // admits onto the storage a slot kept (white box)
    std::string label() const { return cat(params.empty() ? "(defaults)" : params, recycle ? " recycle" : ""); }
};
// What a study's settings may be sized by: the server's slots and the mean
// request (prompt and output tokens).
struct StudyTraffic {
    int slots = 1;
    int mean_request = 1;
};

// A memory's answer to a call that removes part of a sequence (a rewind,
// a shift) where it cannot always do so (llama.cpp's recurrent state).
struct PartialRemoval {
    const char* may_refuse = nullptr;  // why it may refuse it, keeping what it held ("": it must take it)
    int named = 0;                     // the position a refusal names
};

struct EngineEntry {
    std::string_view name;
    const char* plugin = "";              // its path in this build, "" when not built (or in process)
    const char* missing = "not built";    // why not, when not built
    // A plugin run in a process of its own unless the run says otherwise
    // (targets/isolation/): an engine whose crash must be a finding.
    bool isolated = false;
    // In process: creates the engine (nullptr: a plugin, opened through the ABI).
    std::unique_ptr<Engine> (*in_process)(const std::string& faults, const EngineSetup& setup,
                                          const Model& model) = nullptr;
    std::uint32_t in_process_capabilities = 0;         // what one in process declares
    const std::string& (*in_process_faults)() = nullptr;  // its fault switches, as the ABI lists them
    const char* in_process_live = "";                     // its live settings, as the ABI lists them
    // In process: the setting that turns its plan reuse off ("key=value"),
    // for the differential twin (a plugin declares its own: ABI 6 no_reuse_param).
    const char* in_process_no_reuse = nullptr;
    // Its reuse rule, for the build a plugin reports (ABI 8 `build`; an
    // engine in process: kvweld's); none: accounting off.
    std::unique_ptr<ReuseRule> (*rule)(const EngineSetup&, const std::string& build) = nullptr;
    // Why its reuse rule does not apply to the build a plugin reports
    // (ABI 8 `build`; nullptr: it applies): the rule states one release's
    // facts, and another release runs without it, the twin on.
    // Under `params` too: a rule that models one memory is not applied to another.
    const char* (*rule_gap)(const std::string& build, const std::string& params) = nullptr;
    BlockModel (*block_model)(const EngineSetup&) = nullptr;  // the block model that follows its pool
    // The settings setup.params leaves open, drawn and appended.
    std::string (*draw_settings)(const EngineSetup& setup, Rng& rng) = nullptr;
    // The capabilities (KVWELD_CAP_* bits) the engine declares but cannot
    // use under these settings, and why (nullptr: none): no op needs them.
    std::uint32_t (*withheld)(const std::string& params, const char** why) = nullptr;
    // How the engine's memory under these settings takes a call that
    // removes part of a sequence (nullptr: whole, as a KV cache does).
    PartialRemoval (*partial_removal)(const std::string& params, const MemoryCall& call) = nullptr;
    // Why the fresh prefill (sim/oracle_fresh.cpp) does not judge the
    // engine under these settings where the reference cannot (nullptr: it
    // does): a setting whose rows a prefill does not reproduce within the
    // data tolerance, or one the twin already judges.
    const char* (*fresh_blind)(const std::string& params) = nullptr;
    // Why the reference cannot follow the engine under these settings
    // (nullptr: it can): then the twin is the data oracle.
    const char* (*reference_blind)(const std::string& params) = nullptr;
    // How its embeddings of a row are made under these settings (nullptr:
    // each row's own hidden state, Pooling::none).
    abi::Pooling (*pooling)(const std::string& params) = nullptr;
    // Its known findings file for the release this build makes (sim/known_findings.hpp).
    const char* known_findings = nullptr;
    // The settings the reuse study compares, `params` given or not (none:
    // the one setting asked for, without a twin).
    std::vector<StudySetting> (*study_settings)(const std::string& params, const StudyTraffic& traffic,
                                                bool in_process) = nullptr;
    // Writes a trace's calls as a standalone program against the engine's
    // own API (kvweld repro; none: the engine has no such mapping).
    std::unique_ptr<ReproWriter> (*repro)(const ReproSetup&) = nullptr;
    // A server kvweld drives request by request over HTTP (sim/server/),
    // not through the engine interface: its binary for `release` ("": the
    // pinned one) in the cache scripts/setup fills, or "" with `why` naming
    // where it looked and what builds it (nullptr: not a server).
    std::string (*server_binary)(const std::string& release, std::string* why) = nullptr;
    // A server's program that writes a model of another architecture than
    // llama to a file (kvweld-arch-model: a server loads files only), ""
    // where this build has none; `missing` then says why.
    const char* arch_model_writer = "";
};

}  // namespace kvweld::targets
