// `kvweld mutants`: the kill matrix.
#include "cli/commands.hpp"
#include "engines/registry.hpp"

#include "sim/mutants.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <thread>

namespace kvweld::cli {

using namespace kvweld::sim;

namespace {

struct MutantsArgs {
    std::uint64_t seeds = 100;
    int steps = 300;
    int jobs = 0;
    std::string model, backend = "cpu", json;
    std::vector<std::string> faults;
    std::string engine, params;
};

int run_mutants_cmd(const MutantsArgs& a) {
    if (!a.engine.empty()) {
        const RunOptions run{a.steps, a.model, a.backend, a.faults, a.engine, a.params};
        return run_engine_mutants(run, a.seeds,
                                  a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
                                  a.json);
    }
    require(kFaultsCompiled, "mutants needs a build with fault switches (KVWELD_FAULTS); this one has none");
    MutantsOptions o;
    o.seeds = a.seeds;
    o.steps = a.steps;
    o.jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    o.model = a.model;
    o.backend = backend_from_string(a.backend);
    std::string why;
    require(o.backend != Backend::cuda || cuda_backend_available(&why), "CUDA backend unavailable: ", why);
    for (const std::string& name : a.faults) {
        o.only.push_back(require_fault(name, FaultDesign::dense));
    }
    const MutantsResult r = run_mutants(o, [](const std::string& line) {
        std::fprintf(stderr, "[mutants] %s\n", line.c_str());
    });
    const std::string table = mutants_table(r, o);
    std::fwrite(table.data(), 1, table.size(), stdout);
    if (!a.json.empty()) write_json(a.json, mutants_json(r, o));
    return r.ok() ? 0 : 1;
}

}  // namespace

void add_mutants_command(CLI::App& app, std::function<int()>& action) {
    auto args = std::make_shared<MutantsArgs>();
    CLI::App* cmd = app.add_subcommand(
        "mutants", "Kill matrix: every seed runs for the clean engine, which must pass, and for each fault "
                   "switch alone, which must be caught, every failing seed in one of the fault's expected "
                   "classes; prints the outcomes per fault. Exit 0 all killed, 1 otherwise, 2 bad input");
    cmd->add_option("--seeds", args->seeds, "swarm budget per fault: seeds 0..N-1")
        ->capture_default_str()->check(CLI::Range(1, 1000000));
    cmd->add_option("--steps", args->steps, "ops per seed")->capture_default_str()->check(CLI::Range(1, 1000000));
    cmd->add_option("--jobs", args->jobs, "worker threads (default: all cores)")->check(CLI::Range(0, 1024));
    cmd->add_option("--model", args->model, "model dims (default: drawn per seed)");
    cmd->add_option("--backend", args->backend, "cpu or cuda")->capture_default_str();
    cmd->add_option("--fault", args->faults, "only these faults (repeatable; default: all)");
    cmd->add_option("--json", args->json, "write the matrix as JSON here");
    cmd->add_option("--engine", args->engine,
                    cat("an engine behind the plugin ABI (", builtin_engine_names(), " or a .so): the clean engine and "
                        "each fault switch the plugin lists, through the serving simulator, every failing seed in one "
                        "of the classes the plugin declares for the fault"));
    cmd->add_option("--params", args->params, "the --engine's settings, k=v,...");
    cmd->callback([args, &action] { action = [args] { return run_mutants_cmd(*args); }; });
}

}  // namespace kvweld::cli
