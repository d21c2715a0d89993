// kvweld's dense engine in the registry: opened in process, and the
// settings a seed draws (engines/registry.hpp): the
// rebind policy, either one half the time; a setting given (--params) wins.
// The backend is never drawn: it is where the run is, given by --backend.
#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "engines/abi_lists.hpp"
#include "engines/kvweld/dense_engine.hpp"
#include "engines/kvweld/kvweld_plugin_base.hpp"
#include "engines/registry.hpp"

namespace kvweld::engines {

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

}  // namespace kvweld::engines
