// What passes between the server simulator's client and llama-server, and
// what the oracles account (sim/server/server_exchange.cpp): one answer as
// the server gave it, the LoRA adapters a run loads and the scales it
// sends, the oracles' tallies and tolerance. Beneath both the simulator
// (server_sim.hpp) and its oracles (server_oracles.hpp), which share them.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"
#include "engine/reference.hpp"
#include "sim/server/server_ops.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::sim::server {

inline constexpr float kServerLoraScale = 1.0f;     // each --lora adapter's scale until POST /lora-adapters sets one

// One completion as the server answered it.
struct ServerAnswer {
    std::vector<int> tokens;                                // generated
    std::vector<std::vector<std::pair<int, double>>> top;   // per generated token: (id, logprob), most likely first
    std::vector<double> chosen;                             // per generated token: its own logprob
    int cache_n = 0;                                        // prompt tokens the server did not compute again
    int slot = -1;                                          // the slot that served it
    int index = 0;                                          // which of n_cmpl
    bool cut = false;                                       // a stream the client closed early
    int held = -1;                                          // cut: the tokens its slot holds once idle (GET /slots), else -1
    int drafted = 0, accepted = 0;                          // speculative (-md): draft tokens proposed, accepted
};

// Context shift (--context-shift): before it decodes a generated token
// into a slot holding n_ctx - 1 tokens, the server drops the first half of
// those past n_keep and moves the rest down (server-context.cpp:3112-3172,
// pre_decode). Each shift of an answer: before decoding generated token
// `before`, positions [keep, keep + discard) of `len` are dropped.
// shift_ctx: the slot's context (0: no shifting).
struct ContextShift {
    int before, len, keep, discard;
};
std::vector<ContextShift> context_shifts(const Completion& c, const ServerAnswer& a, int shift_ctx);

// The tokens a slot holds after an answer: the prompt and every generated
// token but the last (never decoded), less what context shifts dropped.
// After a cut stream the server may have decoded on past what the client
// saw: where its count (held) names no token the client did not see,
// exactly that many.
std::vector<int> held_after(const Completion& c, const ServerAnswer& a, int shift_ctx = 0);

// What the server chose for each op (its slots, cache hits, tokens), as a
// trace records it beside the op ("got"), and back: the answers in the
// server's order (n_cmpl: index order), without their log probabilities.
nlohmann::json observed_json(const std::vector<ServerAnswer>& answers);
std::vector<ServerAnswer> answers_from_observed(const nlohmann::json& got);

// Each completion an op sent, with the answers a trace recorded for it: one
// per request of a complete or a burst, none for the other kinds.
struct Answered {
    Completion request;
    std::vector<ServerAnswer> answers;
};
std::vector<Answered> answered(const ServerOp& op, const nlohmann::json& observed);
// The server's scales an op sets (a lora op's, or what a during op sent
// while its stream ran), after its completions; none for the other ops.
std::optional<Lora> scales_set(const ServerOp& op);

// The LoRA adapters of a run (`n`, from the weights seed): llama-server
// loads each from a file (--lora), and the oracles' reference runs with them.
std::vector<std::shared_ptr<const LoraAdapter>> server_loras(const ModelConfig& config, std::uint64_t seed, int n);
// Adapters at `scales` (by id) for the reference.
Adapters adapters_at(const ModelConfig& config, const std::vector<std::shared_ptr<const LoraAdapter>>& loras,
                     const std::vector<float>& scales);
// A run's draft model (-md): the model's own weights (draft 1: the target
// accepts every draft, so each verification batch holds several tokens)
// or other weights of the same shape and vocabulary (draft 2: most
// rejected, so the server removes them from its KV). Drafts of kDraftMax.
std::uint64_t draft_seed(std::uint64_t seed, int draft);
inline constexpr int kDraftMax = 4;
// ngram drafts (settings.ngram): looked up after the slot's last 2 tokens (a random
// model's greedy text repeats, so they are often accepted), kDraftMax long.
inline constexpr int kNgramLookup = 2;

// [{"id": i, "scale": s}, ...]: a request's "lora" and POST /lora-adapters' body.
nlohmann::json lora_body(const std::vector<float>& scales);

// What a run's oracles checked, added up over runs (the swarm's table): each
// oracle fills its own fields (ServerOracle::tally).
struct ServerTally {
    std::array<long, kServerOpKinds> ops{};  // ops run, by kind
    long tokens_judged = 0;                  // logprobs
    long drafted = 0, accepted = 0;          // of them, speculative drafts proposed and accepted
    long context_shifts = 0;                 // context shifts the judged answers went through
    double worst_logprob = 0;
    long cache_n = 0, cache_allowed = 0;     // reuse
    long stale = 0, lost = 0, slot_actions = 0;
    long restored = 0, unbounded = 0;        // of them, answers a context checkpoint bounds; answers with no lower bound (the memory not modelled)
    long truth_compared = 0, truth_skipped = 0, truth_uncertain = 0;  // ground-truth
    long embeddings = 0;                     // embeddings
    double worst_embedding = 0;
    // Per oracle (by name): the runs it judged, and the runs it could not,
    // by why (ServerSim's table of oracles).
    std::map<std::string, long> ran;
    std::map<std::string, long> variants;  // ops sent, by variant (server_variants.hpp), each variant named from the start
    std::map<std::string, std::map<std::string, long>> not_run;
    void add(const ServerTally& o);
    std::vector<std::string> lines() const;  // a line per oracle, then the ops, then which oracles ran
    std::string oracles_line() const;
    std::string variants_line() const;
};

}  // namespace kvweld::sim::server
