// kvweld server-check: seeded completion requests to a llama-server of
// kvweld's own (targets/llamaserver), on a model kvweld wrote with the
// test vocabulary, each answer judged by two oracles with their own state:
//
// - LogprobOracle: each generated token's top log probabilities against
//   kvweld's reference forward over the prompt and what the server
//   generated before it (greedy: the token is the reference's most likely,
//   or one within the tolerance of it).
// - SlotCacheModel: each answer's timings.cache_n against what its slot's
//   cache holds (its tokens: the slot's last prompt and the tokens decoded
//   after it; the server runs with no host-RAM cache): the longest common
//   prefix, then with --cache-reuse N the chunks of N or more tokens the
//   server may shift into place (its own loop: tools/server
//   server-context.cpp, "reuse chunks from the cached prompt"), at most the
//   prompt's length minus one (the server evaluates the last prompt token
//   again). Higher is a stale read, lower is lost reuse.
//
// The server's settings are drawn from the seed (slots, unified KV, chunk
// reuse); each request is pinned to a slot (id_slot) and is a multi-turn
// chat (that slot's last prompt, its answer and a few new tokens), an
// agent's edit (that prompt with a few tokens cut from its middle), a
// few-shot prompt (a prefix every such prompt shares, a new tail) or a
// fresh one; between them a slot is saved to a file, restored from one
// (into any slot) or erased. The first step of issue 46's --engine
// llama-server: requests one at a time, outside the op table.
#pragma once

#include "engine/model.hpp"
#include "engine/reference.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace kvweld::sim {

// A slot action (llama-server's /slots/{id}?action=...): the slot's tokens
// and KV saved to a file, restored from one into a slot (maybe another), or
// erased.
enum class SlotAction { save, restore, erase };

// One completion as the server answered it.
struct ServerAnswer {
    std::vector<int> tokens;                                  // generated
    std::vector<std::vector<std::pair<int, double>>> top;     // per generated token: (id, logprob), most likely first
    int cache_n = 0;                                          // prompt tokens the server did not compute again
    int slot = -1;                                            // the slot that served it
};
ServerAnswer parse_server_answer(const std::string& json);  // throws Error naming what is missing

// What a slot reuses of its tokens for a new prompt, as the server plans
// it: the longest common prefix, then (cache_reuse > 0) each later run of
// at least cache_reuse tokens it holds, shifted into place (tools/server
// server-context.cpp, "reuse chunks from the cached prompt"); n_past is at
// most the prompt's length minus one (the last token is evaluated again).
struct ReusePlan {
    struct Chunk {
        int from, to, n;  // held[from, from + n) moves to positions [to, to + n)
    };
    int n_past = 0;
    std::vector<Chunk> chunks;
};
ReusePlan plan_reuse(const std::vector<int>& held, const std::vector<int>& prompt, int cache_reuse);

// Each slot's KV as the server holds it, mirrored on kvweld's reference:
// a reused prefix kept, a shifted chunk moved with its keys rotated for
// their new positions (rows computed under the old context: chunk reuse is
// not the fresh prompt's KV, and the oracle expects exactly that), the
// rest computed. Each generated token is judged on it.
class LogprobOracle {
public:
    LogprobOracle(const Model& model, double tolerance, int slots, int cache_reuse);
    // "" where the answer is right, else what differs.
    std::string judge(int slot, const std::vector<int>& prompt, const ServerAnswer& answer);
    // The slot's KV saved, restored or erased as the server does it.
    void on_slot_action(SlotAction action, int slot, int file);
    double worst() const { return worst_; }
    int tokens_judged() const { return judged_; }

private:
    struct Slot {
        std::vector<int> held;  // tokens at positions 0..
        ReferenceKv kv;
    };
    const Model& model_;
    double tolerance_, worst_ = 0;
    int cache_reuse_, judged_ = 0;
    std::vector<Slot> slots_;
    std::vector<Slot> files_;  // what each saved file holds
};

class SlotCacheModel {
public:
    SlotCacheModel(int slots, int cache_reuse) : held_(std::size_t(slots)), cache_reuse_(cache_reuse) {}
    // "" where cache_n is what the slot allows, else which way it is off.
    std::string judge(int slot, const std::vector<int>& prompt, const ServerAnswer& answer);
    // The tokens the server says the action moved (n_saved, n_restored,
    // n_erased) against what the slot or the file held: "" where equal.
    std::string on_slot_action(SlotAction action, int slot, int file, int n);
    int stale() const { return stale_; }
    int lost() const { return lost_; }
    long reused() const { return reused_; }
    long allowed() const { return allowed_; }

private:
    std::vector<std::vector<int>> held_;  // each slot's tokens
    std::vector<std::vector<int>> files_;  // each saved file's
    int cache_reuse_;                      // --cache-reuse (0: off)
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
    std::string settings;  // the server's flags drawn from the seed
    int requests = 0, tokens = 0, stale = 0, lost = 0, slot_actions = 0;
    long reused = 0, allowed = 0;
    double worst_logprob = 0;
    std::vector<std::string> failures;  // "request K: ..."
    std::string log;                    // the server's log file
};

// The server's flags `seed` draws (slots, unified KV, chunk reuse).
std::string server_check_settings(std::uint64_t seed);

// The requests of `seed`, each sent and judged; a server that fails or
// ends is an Error naming the request and quoting its log.
ServerCheckResult server_check(const ServerCheckConfig& config);

}  // namespace kvweld::sim
