// The server simulator's oracles, each with its own state, each told every
// request and its answers (ServerOracle: one method per kind of exchange,
// none with a default), each returning "" where the answer is right, else
// what differs. None judges the server by what it says about itself alone:
//
// - LogprobOracle: each generated token's log probabilities against
//   kvweld's reference forward over the tokens the slot holds (its own
//   mirror of each slot's KV, chunk shifts and context shifts included); greedy: the token is
//   the reference's most likely, or within the tolerance of it.
// - SlotCacheModel: each answer's timings.cache_n against what its slot
//   held (the longest common prefix, the chunks --cache-reuse may shift in;
//   the server evaluates the last prompt token again), and each slot
//   action's count against what the slot or file held. Higher is a stale
//   read, lower is lost reuse. KV computed with other LoRA scales than the
//   request's holds nothing it may reuse. The copies of an n_cmpl request hold
//   nothing once they end (server-context.cpp release(): "do not keep
//   context of the child slots - the parent's context is enough"). A cut
//   stream's slot holds what the client saw, give or take the tokens the
//   server decoded before it heard.
// - GroundTruth: a second server in lockstep, one slot, caching off, each
//   request sent to it fresh: the same tokens (sampled ones too: the same
//   seed), the same log probabilities. Skipped where the slot reuses KV a
//   shifted chunk left (computed under another context: not the fresh one).
// The three that follow slots do so through one slot model each
// (slot_states.hpp: the slots, the slot files, the host-RAM prompt cache,
// the server's scales), over a slot state of their own: a state saved to a
// file or to the RAM cache and loaded into another slot keeps its tokens,
// its KV and its LoRA scales.
// - EmbeddingOracle: each pooled embedding against the reference's (the
//   hidden states after the final norm, mean or last, L2-normalized).
#pragma once

#include "engine/reference.hpp"
#include "sim/server/server_exchange.hpp"
#include "sim/server/server_oracle.hpp"
#include "sim/server/server_settings.hpp"
#include "sim/server/slot_states.hpp"
#include "targets/llamaserver/server_process.hpp"

#include <memory>
#include <string>
#include <vector>

namespace kvweld::sim::server {

// Each oracle takes the run's settings whole (and the model's context,
// which sizes the slots and the RAM cache): what it follows of them is its own.
class LogprobOracle final : public ServerOracle {
public:
    // `loras`: the run's adapters, one per settings.loras.
    LogprobOracle(const ServerSettings& settings, const Model& model, std::vector<std::shared_ptr<const LoraAdapter>> loras);
    std::string name() const override { return "logprobs"; }
    std::string on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) override;
    std::string on_slot(const Slot& op, int n) override;
    std::string on_embedding(const Embed& op, const std::vector<std::vector<float>>& embeddings) override;
    std::string on_lora(const Lora& op) override;
    void tally(ServerTally& t) const override;
    double worst() const { return worst_; }
    int tokens_judged() const { return judged_; }

private:
    struct Mirror {
        std::vector<int> tokens;  // at positions 0..
        ReferenceKv kv;
        std::vector<float> scales = {};  // the LoRA scales its KV was computed with
        void clear() { tokens.clear(); }
    };
    std::string judge(Mirror& m, const Completion& c, const ServerAnswer& a);
    const Model& model_;
    double tolerance_, worst_ = 0;
    int cache_reuse_, shift_ctx_, judged_ = 0, shifts_ = 0;
    SlotStates<Mirror> states_;
    std::vector<std::shared_ptr<const LoraAdapter>> loras_;
};

class SlotCacheModel final : public ServerOracle {
public:
    SlotCacheModel(const ServerSettings& settings, int model_ctx);
    std::string name() const override { return "reuse"; }
    std::string on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) override;
    std::string on_slot(const Slot& op, int n) override;
    std::string on_embedding(const Embed& op, const std::vector<std::vector<float>>& embeddings) override;
    std::string on_lora(const Lora& op) override;
    void tally(ServerTally& t) const override;
    int stale() const { return stale_; }
    int lost() const { return lost_; }
    // Answers whose count only a checkpoint of another prompt gives (where
    // a chunk or context shift leaves the count unmodelled, too).
    int foreign_restores() const { return foreign_; }
    // Counts a checkpoint of another prompt gives where a sliding window's
    // own memory (its common prefix, kept where its positions pass the
    // server's test, which kvweld does not model) may give it too.
    int window_or_foreign_restores() const { return window_or_foreign_; }
    // The least and most cache_n `slot` allows for `c` now, were it served
    // there (a server script's expectation; the traffic study's).
    std::pair<int, int> allowed(const Completion& c, int slot) const;
    // The LoRA scales `c` runs with (the server's where it names none).
    const std::vector<float>& scales(const Completion& c) const { return states_.scales(c); }

private:
    // A context checkpoint the server made of a slot (create_checkpoint,
    // server-context.cpp:2513-2577): the memory's state after the slot's
    // first n_tokens tokens (`tokens`, which the server does not keep),
    // made while serving request `task`.
    struct Checkpoint {
        int n_tokens, task;
        std::vector<int> tokens;
        bool operator==(const Checkpoint&) const = default;
    };
    // A slot's tokens; after a cancelled stream, up to `maybe_more` tokens
    // past them that the server may have generated before it stopped.
    struct Held {
        std::vector<int> tokens;
        int maybe_more = 0;
        std::vector<float> scales = {};  // the LoRA scales its KV was computed with
        std::vector<Checkpoint> checkpoints = {};  // oldest first, as the server keeps them
        // Whether `checkpoints` are the server's: not once a cut stream,
        // whose answer carries no count, made some from a count unknown
        // (one the model allows only 0 for is known).
        bool known = true;
        void clear() { *this = {}; }
        // A slot file keeps the tokens and the memory, not the checkpoints
        // (a restore clears them: server_prompt::clear).
        Held as_saved() const { return {tokens, maybe_more, scales, {}, true}; }
    };
    // How the slot's memory takes a prompt that shares a prefix with it:
    // kv, a KV cache, which keeps any prefix; state, a recurrent state
    // (mamba, lfm2, lfm2_swa), whose smallest position is its last, so the
    // server reuses a prefix from a checkpoint or not at all; window, a
    // sliding-window cache (granite_swa), whose smallest position kvweld
    // does not model (no lower bound).
    enum class Memory { kv, state, window };
    struct Bounds {
        int lo, hi;
        bool checkpoint;  // lo is a checkpoint's
        bool unbounded;   // lo is 0 for want of a model
        // Another memory's: the counts it may answer (0, the common prefix
        // kept, a checkpoint of this prompt restored); empty: any in [lo, hi].
        std::vector<int> may = {};
        std::vector<int> foreign = {};  // counts only a checkpoint of another prompt gives
    };
    static Memory memory_of(const ServerSettings& s);
    std::string judge(const Held& before, const Completion& c, const ServerAnswer& a);
    std::string judge_cut(const Held& before, const Completion& c, const ServerAnswer& a);
    std::string judge_foreign(const Bounds& b, const ServerAnswer& a);
    std::string slot_choice(const Completion& c, const std::vector<ServerAnswer>& answers) const;
    Bounds bounds(const Held& before, const Completion& c) const;
    Bounds memory_bounds(const Held& before, const Completion& c) const;
    Held after(const Held& before, const Completion& c, const ServerAnswer& a) const;
    void make_checkpoints(std::vector<Checkpoint>& checkpoints, int n_past, const std::vector<int>& prompt) const;
    void add_checkpoint(std::vector<Checkpoint>& checkpoints, Checkpoint k) const;
    int cache_reuse_, shift_ctx_, stale_ = 0, lost_ = 0, actions_ = 0, foreign_ = 0, window_or_foreign_ = 0;
    Memory memory_;
    int n_swa_;  // the window the server checks positions against (server-context.cpp:1337)
    int ctx_checkpoints_, checkpoint_min_step_;
    int requests_ = 0;  // the request being served: a checkpoint's task
    SlotStates<Held> states_;
    long reused_ = 0, allowed_ = 0, restored_ = 0, unbounded_ = 0;
    int drafted_ = 0, accepted_ = 0;  // the answers' draft tokens (timings), on every arch
};

class GroundTruth final : public ServerOracle {
public:
    // Starts the ground-truth server (one slot, no cache) with `setup`'s binary and model.
    GroundTruth(targets::llamaserver::ServerSetup setup, const ServerSettings& settings, int model_ctx, int vocab, double timeout_s);
    std::string name() const override { return "ground-truth"; }
    std::string on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) override;
    std::string on_slot(const Slot& op, int n) override;
    std::string on_embedding(const Embed& op, const std::vector<std::vector<float>>& embeddings) override;
    std::string on_lora(const Lora& op) override;
    void tally(ServerTally& t) const override;

private:
    // Token by token; a sampled answer past a token whose draw a sampler
    // cut-off within the tolerance left open is not compared (uncertain_).
    std::string compare(const ServerAnswer& got, const ServerAnswer& truth, bool sampled);
    ServerAnswer ask(const Completion& c);
    // A slot's tokens, and how many of the first its KV holds as a fresh
    // prompt would: a shifted chunk was computed under another context, and
    // so is every position after it, until a prompt rewrites them.
    struct Held {
        std::vector<int> tokens;
        int fresh = 1 << 30;
        void clear() { *this = {}; }
    };
    targets::llamaserver::ServerProcess process_;
    int cache_reuse_, shift_ctx_, vocab_;
    // Drafts (a draft model or ngram): a sampled answer's tokens after its
    // first are drawn by rejection against the drafts
    // (server-context.cpp:503-506), not by the plain sampler the ground
    // truth runs: only its first is compared.
    bool speculative_;
    double timeout_s_, tolerance_;
    int compared_ = 0, skipped_ = 0, uncertain_ = 0;
    SlotStates<Held> states_;  // its server scales: each request is sent to the ground truth with its scales named
};

class EmbeddingOracle final : public ServerOracle {
public:
    EmbeddingOracle(const ServerSettings& settings, const Model& model);
    std::string name() const override { return "embeddings"; }
    std::string on_completion(const Completion& c, const std::vector<ServerAnswer>& answers) override;
    std::string on_slot(const Slot& op, int n) override;
    std::string on_embedding(const Embed& op, const std::vector<std::vector<float>>& embeddings) override;
    std::string on_lora(const Lora& op) override;
    void tally(ServerTally& t) const override;

private:
    const Model& model_;
    std::string pooling_;
    KvType kv_type_;
    double tolerance_, worst_ = 0;
    int judged_ = 0;
};

// The reference's pooled embedding of `tokens` (mean or last), L2-normalized.
std::vector<float> reference_embedding(const Model& model, const std::vector<int>& tokens, const std::string& pooling,
                                       KvType kv_type);

}  // namespace kvweld::sim::server
