#include "cli/commands.hpp"

#include <cstdio>

namespace {
// 0, 1 and 3..6 are verdicts (sim/verdict.hpp); 70 is sysexits' EX_SOFTWARE.
constexpr int kBadInput = 2;
constexpr int kInternalError = 70;
}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvweld: a deterministic harness for held decode plans welded to KV buffers"};
    app.require_subcommand(1);
    std::function<int()> action;
    kvweld::cli::add_sim_commands(app, action);
    kvweld::cli::add_swarm_command(app, action);
    kvweld::cli::add_merge_command(app, action);
    kvweld::cli::add_mutants_command(app, action);
    kvweld::cli::add_traffic_command(app, action);
    kvweld::cli::add_diff_command(app, action);
    kvweld::cli::add_versions_command(app, action);
    kvweld::cli::add_repro_command(app, action);
    kvweld::cli::add_decode_command(app, action);
    kvweld::cli::add_convert_command(app, action);
    kvweld::cli::add_forward_command(app, action);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help is a success; every usage error is bad input.
        return app.exit(e) == 0 ? 0 : kBadInput;
    }
    try {
        return action();
    } catch (const kvweld::Error& e) {
        std::fprintf(stderr, "kvweld: error: %s\n", e.what());
        return kBadInput;
    } catch (const std::exception& e) {
        // Anything else is kvweld's own fault (input is checked before use).
        std::fprintf(stderr, "kvweld: internal error: %s\n", e.what());
        return kInternalError;
    }
}
