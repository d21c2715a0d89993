// kvweld's dense engine in the registry, in process ("inproc") and as a
// plugin ("kvweld"): how it is opened in process, the settings a seed
// draws (the rebind policy, either one half the time; a setting given
// wins; the backend is never drawn: it is where the run is, --backend),
// and the settings the reuse study compares.
#include "util/cat.hpp"
#include "util/error.hpp"
#include "targets/abi_lists.hpp"
#include "targets/kvweld/dense_engine.hpp"
#include "targets/kvweld/kvweld_plugin_base.hpp"
#include "targets/kvweld/kvweld_entries.hpp"

#ifndef KVWELD_PLUGIN_PATH
#define KVWELD_PLUGIN_PATH ""
#endif

namespace kvweld::targets {

namespace {

// In process the scheduler is the simulator's, so its fault is listed too.
const std::string& dense_fault_list() {
    static const std::string names = abi::fault_names_for([](const FaultInfo& f) { return f.design != FaultDesign::paged; });
    return names;
}

std::string kvweld_dense_settings(const EngineSetup& setup, Rng& rng) {
    const bool rebuild = rng.chance(0.5);
    const auto given = abi::parse_params(setup.params.c_str(), {"policy", "backend", "reuse"});
    if (given.count("policy")) return setup.params;
    return cat(setup.params, setup.params.empty() ? "" : ",", "policy=", rebuild ? "rebuild" : "rebind");
}

std::unique_ptr<Engine> open_dense_engine(const std::string& faults, const EngineSetup& setup, const Model& model) {
    FaultSet set;
    for (const std::string& name : abi::split_list(faults.c_str())) set.add(require_fault(name, FaultDesign::dense));
    require(set.empty() || kFaultsCompiled, "faults need a build with fault switches (KVWELD_FAULTS); this one has none");
    return std::make_unique<DenseEngine>(model, setup, set);
}

// Each rebind policy on fresh storage and, in process, rebinding on
// recycled storage, each beside its twin that builds every token.
std::vector<StudySetting> kvweld_dense_study(const std::string& params, const StudyTraffic&, bool in_process) {
    if (!params.empty()) return {{params, ""}};
    std::vector<StudySetting> out;
    for (const char* policy : {"policy=rebuild", "policy=rebind"}) out.push_back({policy, cat(policy, ",reuse=0")});
    if (in_process) out.push_back({"policy=rebind", "policy=rebind,reuse=0", true});
    return out;
}

}  // namespace

const EngineEntry kInprocEntry{
    .name = "inproc",
    .plugin = "",
    .missing = "",
    .in_process = open_dense_engine,
    .in_process_capabilities = kDenseCapabilities,
    .in_process_faults = dense_fault_list,
    .in_process_live = abi::kThreadsEmbeddingsCausal,
    .in_process_no_reuse = kDenseNoReuse,
    .rule = kvweld_reuse_rule,
    .draw_settings = kvweld_dense_settings,
    .study_settings = kvweld_dense_study,
};

const EngineEntry kKvweldEntry{
    .name = "kvweld",
    .plugin = KVWELD_PLUGIN_PATH,
    .rule = kvweld_reuse_rule,
    .draw_settings = kvweld_dense_settings,
    .study_settings = kvweld_dense_study,
};

}  // namespace kvweld::targets
