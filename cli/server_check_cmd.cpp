// `kvweld server-check`: seeded completions to a llama-server of kvweld's
// own, each judged against the reference forward and a model of the slot's
// cache (sim/server_check.hpp). Exit 0 pass, 1 a failure (the first few
// named, with the command that reproduces them), 2 bad input or a server
// that failed or ended (its log quoted).
#include "cli/commands.hpp"

#include "sim/server_check.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

namespace kvweld::cli {

namespace {

int run_server_check(const sim::ServerCheckConfig& given) {
    require(!given.server.empty(), "server-check: no --server given (a llama-server binary; scripts/setup-llama builds "
                                   "one into the cache, install/bin/llama-server)");
    sim::ServerCheckConfig c = given;
    if (c.work_dir.empty())
        c.work_dir = (std::filesystem::temp_directory_path() / cat("kvweld-server-check-", ::getpid())).string();
    std::printf("server-check: seed %llu, %d requests to %s (%s, no host-RAM cache) on a random %s model (test "
                "vocabulary)\n",
                static_cast<unsigned long long>(c.seed), c.requests, c.server.c_str(),
                sim::server_check_settings(c.seed).c_str(), c.preset.c_str());
    std::fflush(stdout);
    const sim::ServerCheckResult r = sim::server_check(c);
    std::printf("logprobs: %d generated tokens judged against kvweld's reference forward, max |logprob - reference| "
                "%.3g (tolerance 1e-4)\n", r.tokens, r.worst_logprob);
    std::printf("reuse: cache_n %ld of the %ld prompt tokens the slot held (stale reads %d, lost reuse %d)\n", r.reused,
                r.allowed, r.stale, r.lost);
    for (std::size_t i = 0; i < r.failures.size() && i < 5; ++i) std::printf("FAIL %s\n", r.failures[i].c_str());
    const bool pass = r.failures.empty();
    std::printf("verdict: %s\n", pass ? "PASS" : "FAIL");
    if (pass) {
        if (given.work_dir.empty()) std::filesystem::remove_all(c.work_dir);
        return 0;
    }
    std::printf("the server's log: %s\nreproduce: kvweld server-check --server %s --config %s --seed %llu --requests %d\n",
                r.log.c_str(), c.server.c_str(), c.preset.c_str(), static_cast<unsigned long long>(c.seed), c.requests);
    return 1;
}

}  // namespace

void add_server_check_command(CLI::App& app, std::function<int()>& action) {
    auto c = std::make_shared<sim::ServerCheckConfig>();
    CLI::App* cmd = app.add_subcommand(
        "server-check", "Seeded completions (multi-turn chats, agents' edits, few-shot prompts, fresh ones) to a "
                        "llama-server kvweld starts on 127.0.0.1, each answer's log probabilities judged against kvweld's "
                        "reference forward and its cache_n against what its slot held; the server's slots, unified KV and chunk reuse are drawn from the seed. Exit 0 pass, 1 a failure, 2 "
                        "bad input or a server that failed");
    cmd->add_option("--server", c->server, "the llama-server binary")->required();
    cmd->add_option("--config", c->preset, cat("the random model's dims: ", preset_names()))->capture_default_str();
    cmd->add_option("--seed", c->seed, "the seed of the model's weights and of the requests")
        ->capture_default_str()
        ->check(seed_validator());
    cmd->add_option("--requests", c->requests, "how many requests")->capture_default_str();
    cmd->add_option("--work-dir", c->work_dir, "where the model and the server's log go (default: a temporary "
                                               "folder, removed when the run passes)");
    cmd->callback([c, &action] { action = [c] { return run_server_check(*c); }; });
}

}  // namespace kvweld::cli
