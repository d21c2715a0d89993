// `kvweld forward`: kvweld's reference forward over one token sequence,
// printed as each position's most likely next tokens with their log
// probabilities. What an engine that serves the same weights (llama-server
// on a `kvweld convert` model, greedy, with n_probs) must return for the
// tokens it was given and the tokens it generated: the logprobs oracle of
// a server run, usable by hand.
#include "cli/commands.hpp"

#include "engine/checkpoint.hpp"
#include "engine/gguf.hpp"
#include "engine/reference.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

namespace kvweld::cli {

namespace {

struct ForwardArgs {
    std::string model;   // a .gguf or llama2.c .bin file (or empty with --config)
    std::string config;  // a preset's random model
    std::uint64_t seed = 1;
    std::vector<int> tokens;
    int top = 5;
};

Model load_model(const ForwardArgs& a) {
    require(a.model.empty() != a.config.empty(), "forward: give either a model file or --config (a random model)");
    if (!a.config.empty()) return Model::random(config_by_name(a.config), a.seed);
    return a.model.ends_with(".bin") ? load_llama2c(a.model) : load_gguf(a.model);
}

int run_forward(const ForwardArgs& a) {
    const Model model = load_model(a);
    const ModelConfig& c = model.config();
    require(!a.tokens.empty(), "forward: --tokens is empty");
    require(int(a.tokens.size()) <= c.max_seq_len, "forward: ", a.tokens.size(), " tokens: the model holds at most ",
            c.max_seq_len, " positions");
    require(a.top >= 1 && a.top <= c.vocab, "forward: --top ", a.top, ": from 1 to the vocabulary size ", c.vocab);
    for (std::size_t i = 0; i < a.tokens.size(); ++i)
        require(a.tokens[i] >= 0 && a.tokens[i] < c.vocab, "forward: token ", a.tokens[i], " (index ", i,
                ") is outside the vocabulary [0, ", c.vocab, ")");
    ReferenceKv kv(c);
    for (int pos = 0; pos < int(a.tokens.size()); ++pos) {
        const std::vector<double> lp = log_probs(reference_forward(model, kv, a.tokens[std::size_t(pos)], pos));
        std::vector<int> order(lp.size());
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + a.top, order.end(),
                          [&](int x, int y) { return lp[std::size_t(x)] > lp[std::size_t(y)] || (lp[std::size_t(x)] == lp[std::size_t(y)] && x < y); });
        std::printf("{\"pos\": %d, \"token\": %d, \"top\": [", pos, a.tokens[std::size_t(pos)]);
        for (int k = 0; k < a.top; ++k)
            std::printf("%s[%d, %.9g]", k ? ", " : "", order[std::size_t(k)], lp[std::size_t(order[std::size_t(k)])]);
        std::printf("]}\n");
    }
    return 0;
}

}  // namespace

void add_forward_command(CLI::App& app, std::function<int()>& action) {
    auto args = std::make_shared<ForwardArgs>();
    CLI::App* cmd = app.add_subcommand(
        "forward", "kvweld's reference forward over a token sequence: per position, a JSON line with the top "
                   "next tokens and their log probabilities (what a server on the same weights must return "
                   "with n_probs, greedy): kvweld forward --config NAME --seed S --tokens 1,2,3, or kvweld "
                   "forward MODEL.gguf --tokens 1,2,3");
    cmd->add_option("MODEL", args->model, "a GGUF file kvweld wrote, or a llama2.c checkpoint (omit with --config)");
    cmd->add_option("--config", args->config, cat("a seeded random model of these dims: ", preset_names()));
    cmd->add_option("--seed", args->seed, "weight seed with --config")->capture_default_str()->check(seed_validator());
    cmd->add_option("--tokens", args->tokens, "the token ids, comma separated")->delimiter(',')->required();
    cmd->add_option("--top", args->top, "how many of the most likely next tokens to print per position")
        ->capture_default_str();
    cmd->callback([args, &action] { action = [args] { return run_forward(*args); }; });
}

}  // namespace kvweld::cli
