// `kvweld mutants`: the kill matrix.
#include "cli/commands.hpp"
#include "targets/registry.hpp"


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
    std::string engine{targets::kDefaultEngine}, params;
    bool twin = false;
    bool until_killed = false;
    std::string known_findings;
};

int run_mutants_cmd(const MutantsArgs& a) {
    RunOptions run;
    run.steps = a.steps;
    run.model = a.model;
    run.backend = a.backend;
    run.faults = a.faults;
    run.engine = a.engine;
    run.params = a.params;
    run.twin = a.twin;
    run.known_findings = a.known_findings;
    const int jobs = a.jobs > 0 ? a.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return run_mutants(run, a.seeds, jobs, a.json, a.until_killed);
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
                    cat("the engine (", builtin_engine_names(), " or a plugin's .so): the clean engine and each fault "
                        "switch it lists, every failing seed in one of the classes it declares for the fault"))
        ->capture_default_str();
    cmd->add_option("--params", args->params, "the --engine's settings, k=v,...");
    cmd->add_flag("--twin", args->twin, "run the differential twin too (the engine with plan reuse off)");
    cmd->add_flag("--until-killed", args->until_killed,
                  "stop each fault at its first seed with a new failure (that seed's class is judged; the later "
                  "seeds are not run, so the outcomes count only up to it); the clean engine runs every seed");
    cmd->add_option("--known-findings", args->known_findings,
                    "the engine release's known findings file (default: the engine's own; none: no file): a seed "
                    "that fails with one counts for neither the clean engine nor a fault");
    cmd->callback([args, &action] { action = [args] { return run_mutants_cmd(*args); }; });
}

}  // namespace kvweld::cli
