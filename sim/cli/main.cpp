#include "sim/cli/commands.hpp"

#include <cstdio>

int main(int argc, char** argv) {
    CLI::App app{"kvweld: a deterministic harness for held decode plans welded to KV buffers"};
    app.require_subcommand(1);
    std::function<int()> action;
    kvweld::cli::add_sim_commands(app, action);
    kvweld::cli::add_swarm_command(app, action);
    kvweld::cli::add_mutants_command(app, action);
    kvweld::cli::add_traffic_command(app, action);
    kvweld::cli::add_decode_command(app, action);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        return action();
    } catch (const kvweld::Error& e) {
        std::fprintf(stderr, "kvweld: error: %s\n", e.what());
        return 2;
    }
}
