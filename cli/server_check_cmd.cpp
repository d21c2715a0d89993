// `kvweld server-check`: seeded completions to a llama-server of kvweld's
// own, each judged against the reference forward and a model of its slot's
// cache (sim/server_check.hpp), one server per seed. Exit 0 pass, 1 a
// failure (the first few named, each seed's with the command that
// reproduces it), 2 bad input or a server that failed or ended (its log
// quoted).
#include "cli/commands.hpp"

#include "sim/server_check.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace kvweld::cli {

namespace {

struct ServerCheckArgs {
    sim::ServerCheckConfig config;
    std::string seeds;  // --seeds A..B (else --seed)
};

int run_server_check(const ServerCheckArgs& a) {
    require(!a.config.server.empty(), "server-check: no --server given (a llama-server binary; scripts/setup-llama "
                                      "builds one into the cache, install/bin/llama-server)");
    const auto [first, last] = a.seeds.empty() ? std::pair{a.config.seed, a.config.seed} : parse_seed_range(a.seeds);
    const std::string base = a.config.work_dir.empty()
                                 ? (std::filesystem::temp_directory_path() / cat("kvweld-server-check-", ::getpid())).string()
                                 : a.config.work_dir;
    std::printf("server-check: seeds %llu..%llu, %d requests each to %s (no host-RAM cache) on a random %s model "
                "(test vocabulary)\n",
                static_cast<unsigned long long>(first), static_cast<unsigned long long>(last), a.config.requests,
                a.config.server.c_str(), a.config.preset.c_str());
    long tokens = 0, reused = 0, allowed = 0, actions = 0;
    int stale = 0, lost = 0, failed = 0;
    double worst = 0;
    for (std::uint64_t seed = first; seed <= last; ++seed) {
        sim::ServerCheckConfig c = a.config;
        c.seed = seed;
        c.work_dir = cat(base, "/seed-", seed);
        const sim::ServerCheckResult r = sim::server_check(c);
        tokens += r.tokens, reused += r.reused, allowed += r.allowed, stale += r.stale, lost += r.lost;
        actions += r.slot_actions;
        worst = std::max(worst, r.worst_logprob);
        if (r.failures.empty()) {
            std::filesystem::remove_all(c.work_dir);
        } else {
            ++failed;
            std::printf("FAIL seed %llu (%s): %zu requests wrong; the first: %s\n  the server's log: %s\n  reproduce: kvweld "
                        "server-check --server %s --config %s --seed %llu --requests %d\n",
                        static_cast<unsigned long long>(seed), r.settings.c_str(), r.failures.size(), r.failures[0].c_str(),
                        r.log.c_str(), c.server.c_str(), c.preset.c_str(), static_cast<unsigned long long>(seed), c.requests);
        }
        if (last > first && (seed - first + 1) % 50 == 0)
            std::fprintf(stderr, "server-check: %llu of %llu seeds, %d failed\n", static_cast<unsigned long long>(seed - first + 1),
                         static_cast<unsigned long long>(last - first + 1), failed);
    }
    if (a.config.work_dir.empty() && failed == 0) std::filesystem::remove_all(base);
    std::printf("logprobs: %ld generated tokens judged against kvweld's reference forward, max |logprob - reference| "
                "%.3g (tolerance 1e-4)\n", tokens, worst);
    std::printf("reuse: cache_n %ld of the %ld prompt tokens the slots held (stale reads %d, lost reuse %d)\n", reused,
                allowed, stale, lost);
    std::printf("slot actions: %ld saves, restores and erases, each answer's token count against the slot or file "
                "it moved\n", actions);
    std::printf("verdict: %s (%d of %llu seeds failed)\n", failed == 0 ? "PASS" : "FAIL", failed,
                static_cast<unsigned long long>(last - first + 1));
    return failed == 0 ? 0 : 1;
}

}  // namespace

void add_server_check_command(CLI::App& app, std::function<int()>& action) {
    auto a = std::make_shared<ServerCheckArgs>();
    CLI::App* cmd = app.add_subcommand(
        "server-check", "Seeded completions (multi-turn chats, agents' edits, few-shot prompts, fresh ones) to a "
                        "llama-server kvweld starts on 127.0.0.1, each answer's log probabilities judged against "
                        "kvweld's reference forward (over the slot's KV as the server holds it) and its cache_n against "
                        "what its slot held; the server's slots, unified KV and chunk reuse are drawn from the seed. "
                        "Exit 0 pass, 1 a failure, 2 bad input or a server that failed");
    cmd->add_option("--server", a->config.server, "the llama-server binary")->required();
    cmd->add_option("--config", a->config.preset, cat("the random model's dims: ", preset_names()))->capture_default_str();
    cmd->add_option("--seed", a->config.seed, "the seed of the server's settings, the model's weights and the requests")
        ->capture_default_str()
        ->check(seed_validator());
    cmd->add_option("--seeds", a->seeds, "a range of seeds, A..B, one server each (instead of --seed)");
    cmd->add_option("--requests", a->config.requests, "how many requests per seed")->capture_default_str();
    cmd->add_option("--work-dir", a->config.work_dir, "where each seed's model and server log go (default: a temporary "
                                                      "folder, removed when every seed passes)");
    cmd->callback([a, &action] { action = [a] { return run_server_check(*a); }; });
}

}  // namespace kvweld::cli
