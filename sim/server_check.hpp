// kvweld server-check: seeded completion requests to a llama-server of
// kvweld's own (targets/llamaserver), on a model kvweld wrote with the
// test vocabulary, each answer judged by two oracles with their own state:
//
// - LogprobOracle: each generated token's top log probabilities against
//   kvweld's reference forward over the prompt and what the server
//   generated before it (greedy: the token is the reference's most likely,
//   or one within the tolerance of it).
// - SlotCacheModel: each answer's timings.cache_n against what the one
//   slot's cache holds (its tokens: the last prompt and the tokens decoded
//   after it; the server runs with no host-RAM cache): the longest common
//   prefix, at most the prompt's length minus one (the server evaluates
//   the last prompt token again). Higher is a stale read, lower lost reuse.
//
// The requests are multi-turn chats (a prompt extends the last one and its
// answer), few-shot prompts (a shared prefix, a new tail) and fresh ones.
// The first step of issue 46's --engine llama-server: one slot, completions
// only, outside the op table.
#pragma once

#include "engine/model.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kvweld::sim {

// One completion as the server answered it.
struct ServerAnswer {
    std::vector<int> tokens;                                  // generated
    std::vector<std::vector<std::pair<int, double>>> top;     // per generated token: (id, logprob), most likely first
    int cache_n = 0;                                          // prompt tokens the server did not compute again
};
ServerAnswer parse_server_answer(const std::string& json);  // throws Error naming what is missing

class LogprobOracle {
public:
    explicit LogprobOracle(const Model& model, double tolerance) : model_(model), tolerance_(tolerance) {}
    // "" where the answer is right, else what differs.
    std::string judge(const std::vector<int>& prompt, const ServerAnswer& answer);
    double worst() const { return worst_; }
    int tokens_judged() const { return judged_; }

private:
    const Model& model_;
    double tolerance_, worst_ = 0;
    int judged_ = 0;
};

class SlotCacheModel {
public:
    // "" where cache_n is what the slot allows, else which way it is off.
    std::string judge(const std::vector<int>& prompt, const ServerAnswer& answer);
    int stale() const { return stale_; }
    int lost() const { return lost_; }
    long reused() const { return reused_; }
    long allowed() const { return allowed_; }

private:
    std::vector<int> held_;  // the slot's tokens
    int stale_ = 0, lost_ = 0;
    long reused_ = 0, allowed_ = 0;
};

struct ServerCheckConfig {
    std::string server;  // llama-server
    std::string preset = "small";
    std::uint64_t seed = 1;
    int requests = 20;
    std::string work_dir;  // the model and the server's log
};

struct ServerCheckResult {
    int requests = 0, tokens = 0, stale = 0, lost = 0;
    long reused = 0, allowed = 0;
    double worst_logprob = 0;
    std::vector<std::string> failures;  // "request K: ..."
    std::string log;                    // the server's log file
};

// The requests of `seed`, each sent and judged; a server that fails or
// ends is an Error naming the request and quoting its log.
ServerCheckResult server_check(const ServerCheckConfig& config);

}  // namespace kvweld::sim
