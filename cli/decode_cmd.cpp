// `kvweld decode`: decode N tokens with one held plan and print tokens/s and
// the session counters.
#include "cli/commands.hpp"

#include "engine/checkpoint.hpp"
#include "engine/decode_session.hpp"
#include "util/rng.hpp"
#include "engine/weight_memory.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace kvweld::cli {

namespace {

struct DecodeArgs {
    std::string model = "random";
    std::string config = "stories15m";
    int tokens = 200;
    std::uint64_t seed = 1;
    std::string backend = "cpu";
    bool replan = false;
    int threads = 1;
};

Model load_model(const DecodeArgs& a) {
    if (a.model == "random") return Model::random(config_by_name(a.config), a.seed);
    return load_llama2c(a.model);
}

int run_decode(const DecodeArgs& a) {
    const Model model = load_model(a);
    const ModelConfig& c = model.config();
    require(a.tokens >= 1 && a.tokens <= c.max_seq_len,
            "--tokens ", a.tokens, " out of range: must be in 1..max_seq_len = ", c.max_seq_len);
    std::printf("model: %s (%s)\n", a.model.c_str(), c.describe().c_str());
    auto cache = KvCache::with_capacity(c);
    DecodeSession session(
        {.replan_every_token = a.replan, .backend = backend_from_string(a.backend), .threads = a.threads});
    int token = 1 % c.vocab;
    using Clock = std::chrono::steady_clock;
    auto step = [&] {
        const std::span<const float> logits = session.decode(model, cache, token);
        token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    };
    // The first decode builds the plan; it is timed apart (as run.c starts
    // its timer after the first token).
    const auto start = Clock::now();
    step();
    const auto first = Clock::now();
    for (int i = 1; i < a.tokens; ++i) step();
    const double build = std::chrono::duration<double>(first - start).count();
    const double secs = std::chrono::duration<double>(Clock::now() - first).count();
    const SessionCounters& k = session.counters();
    std::printf("first token (plan build) %.1f ms; then %d tokens in %.3f s: %.1f tokens/s (%s, %d thread%s, %s)\n",
                build * 1e3, a.tokens - 1, secs, a.tokens > 1 ? (a.tokens - 1) / secs : 0.0, a.backend.c_str(),
                a.threads, a.threads == 1 ? "" : "s", a.replan ? "replan every token" : "held plan");
    // Throughput hangs on it: in 4 KiB pages the weight-read peer ran 12-19%
    // slower at stories15M dims and 43-46% at 110m (decode_bench
    // weights_stream against weights_stream_4k_pages; docs/MEASURING.md, "Performance").
    if (a.backend == "cpu")
        std::printf("weights %.1f MB; the process's anonymous memory in huge pages: %.1f MB\n",
                    double(model.all_weights().size_bytes()) / 1e6, double(anon_huge_page_bytes()) / 1e6);
    std::printf("counters: builds=%llu rebinds=%llu kept=%llu\n",
                static_cast<unsigned long long>(k.builds), static_cast<unsigned long long>(k.rebinds),
                static_cast<unsigned long long>(k.kept));
    for (int r = 0; r < kBuildReasons; ++r)
        if (k.builds_by_reason[r])
            std::printf("  builds[%s]=%llu\n", std::string(to_string(BuildReason(r))).c_str(),
                        static_cast<unsigned long long>(k.builds_by_reason[r]));
    return 0;
}

}  // namespace

void add_decode_command(CLI::App& app, std::function<int()>& action) {
    auto args = std::make_shared<DecodeArgs>();
    CLI::App* cmd = app.add_subcommand("decode", "Decode N tokens with one held plan; print tokens/s and counters");
    cmd->add_option("--model", args->model, "'random' or a llama2.c checkpoint path")->capture_default_str();
    cmd->add_option("--config", args->config, kvweld::cat("config for --model random: ", kvweld::preset_names()))
        ->capture_default_str();
    cmd->add_option("--tokens", args->tokens, "tokens to decode (greedy)")->capture_default_str();
    cmd->add_option("--seed", args->seed, "weight seed for --model random")->capture_default_str()->check(seed_validator());
    cmd->add_option("--backend", args->backend, "cpu or cuda")->capture_default_str();
    cmd->add_flag("--replan", args->replan, "rebuild the plan every token (measurement only)");
    cmd->add_option("--threads", args->threads, "CPU plan threads (logits are the same for every count)")
        ->capture_default_str()
        ->check(CLI::Range(1, 256));
    cmd->callback([args, &action] { action = [args] { return run_decode(*args); }; });
}

}  // namespace kvweld::cli
