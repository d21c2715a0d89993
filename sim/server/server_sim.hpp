// The server simulator: clients' requests to a llama-server kvweld starts
// on 127.0.0.1 (targets/llamaserver), each answer told to the oracles
// (sim/server/server_oracles.hpp), each with its own state. The settings
// are drawn from the seed first; the requests are drawn as the run goes
// (ServerDraw), from what the server answered before (a chat goes on from
// its last answer); the verdict comes last. A server that fails to start,
// dies, answers 5xx or does not answer in time ends the run with the
// verdict server_error, naming the op and quoting its log.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"
#include "sim/server/server_ops.hpp"
#include "targets/llamaserver/server_process.hpp"
#include "util/rng.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::sim::server {

class ServerOracle;

inline constexpr double kLogprobTolerance = 1e-4;  // |logprob - reference|, as the GGUF test's logits
inline constexpr float kServerLoraScale = 1.0f;     // each --lora adapter's scale until POST /lora-adapters sets one

// The server's command line a seed draws: slots, unified KV or one stream
// per slot, chunk reuse, and whether it serves completions or pooled
// embeddings. Fixed for every seed: F32 KV and flash attention off (the
// reference's numbers), no host-RAM cache (the slots are the caches the
// models follow), a slot save path, one thread.
struct ServerSettings {
    int slots = 1;
    bool unified = false;
    int cache_reuse = 0;     // --cache-reuse (0: off)
    int ctx_extra = 0;       // -c is slots * the model's context, plus this (0 .. slots - 1: a context the slots do not divide)
    int loras = 0;           // LoRA adapters (--lora each; the server's own scales start at kServerLoraScale)
    std::string pooling;     // "" completions; "mean" or "last": --embedding --pooling P
    static ServerSettings draw(std::uint64_t seed);
    bool embeddings() const { return !pooling.empty(); }
    std::vector<std::string> flags() const;  // the drawn flags but -c (it depends on the model)
    std::string describe() const;            // the drawn settings, in a line
    nlohmann::json to_json() const;
    static ServerSettings from_json(const nlohmann::json& j);  // strict: throws Error naming the field
};

struct ServerRunConfig {
    std::string server;           // the llama-server binary
    std::string preset = "small"; // the random model's dims
    std::uint64_t seed = 1;       // its weights (and, generated, the settings and requests)
    ServerSettings settings;
    std::string work_dir;         // the model, the servers' logs, the slot files
    bool lockstep = true;         // a ground-truth server beside it
    double request_timeout_s = 60;
};

// One completion as the server answered it.
struct ServerAnswer {
    std::vector<int> tokens;                                // generated
    std::vector<std::vector<std::pair<int, double>>> top;   // per generated token: (id, logprob), most likely first
    std::vector<double> chosen;                             // per generated token: its own logprob
    int cache_n = 0;                                        // prompt tokens the server did not compute again
    int slot = -1;                                          // the slot that served it
    int index = 0;                                          // which of n_cmpl
    bool cut = false;                                       // a stream the client closed early
};

enum class ServerVerdict { pass, fail, server_error };
std::string_view to_string(ServerVerdict v);

struct ServerFailure {
    std::size_t op = 0;   // its index in the run
    std::string oracle;   // which oracle, or "server"
    std::string message;
};

// The LoRA adapters of a run (`n`, from the weights seed): llama-server
// loads each from a file (--lora), and the oracles' reference runs with them.
std::vector<std::shared_ptr<const LoraAdapter>> server_loras(const ModelConfig& config, std::uint64_t seed, int n);
// Adapters at `scales` (by id) for the reference.
Adapters adapters_at(const ModelConfig& config, const std::vector<std::shared_ptr<const LoraAdapter>>& loras,
                     const std::vector<float>& scales);
// [{"id": i, "scale": s}, ...]: a request's "lora" and POST /lora-adapters' body.
nlohmann::json lora_body(const std::vector<float>& scales);

// What a run's oracles checked, added up over runs (the swarm's table): each
// oracle fills its own fields (ServerOracle::tally).
struct ServerTally {
    std::array<long, kServerOpKinds> ops{};  // ops run, by kind
    long tokens_judged = 0;                  // logprobs
    double worst_logprob = 0;
    long cache_n = 0, cache_allowed = 0;     // reuse
    long stale = 0, lost = 0, slot_actions = 0;
    long truth_compared = 0, truth_skipped = 0;  // ground-truth
    long embeddings = 0;                     // embeddings
    double worst_embedding = 0;
    void add(const ServerTally& o);
    std::vector<std::string> lines() const;  // a line per oracle, then the ops
};

// What the server chose for each op (its slots, cache hits, tokens), as a
// trace records it beside the op.
nlohmann::json observed_json(const std::vector<ServerAnswer>& answers);

class ServerSim {
public:
    // Writes the model, starts the server (and the ground truth); a server
    // that does not start is an Error quoting its log.
    explicit ServerSim(const ServerRunConfig& config);
    ~ServerSim();
    ServerSim(const ServerSim&) = delete;
    ServerSim& operator=(const ServerSim&) = delete;

    // false: the run failed (failure()). `observed`: what the server chose.
    bool apply(const ServerOp& op, std::size_t index, nlohmann::json& observed);
    void end();  // stops the servers

    const ServerRunConfig& config() const { return config_; }
    const Model& model() const { return model_; }
    const std::optional<ServerFailure>& failure() const { return failure_; }
    ServerVerdict verdict() const;
    std::string log_path() const;
    ServerTally tally() const;  // the oracles' account and the ops run
    // For the oracles' tests: one more oracle, told after the others.
    void add_oracle(std::unique_ptr<ServerOracle> oracle);

private:
    void run(const Complete& op, std::size_t index, nlohmann::json& observed);
    void run(const Burst& op, std::size_t index, nlohmann::json& observed);
    void run(const Slot& op, std::size_t index, nlohmann::json& observed);
    void run(const Embed& op, std::size_t index, nlohmann::json& observed);
    void run(const Lora& op, std::size_t index, nlohmann::json& observed);
    // One completion request sent and its answers parsed (several for n_cmpl).
    std::vector<ServerAnswer> send(const Completion& c, const std::string& what);
    void judge_completion(const Completion& c, const std::vector<ServerAnswer>& answers, std::size_t index);
    void fail(std::size_t index, const std::string& oracle, const std::string& message);

    ServerRunConfig config_;
    Model model_;
    std::unique_ptr<targets::llamaserver::ServerProcess> process_;
    std::vector<std::unique_ptr<ServerOracle>> oracles_;
    std::optional<ServerFailure> failure_;
    bool server_error_ = false;
    std::array<long, kServerOpKinds> ops_run_{};
};

// The next request of a generated run: multi-turn chats that go on from a
// slot's last answer, agents that resend their history with an edit,
// few-shot prompts sharing a prefix, fresh prompts; streamed, cancelled,
// sampled, several completions of one prompt, bursts in flight at once,
// slot saves, restores and erases; pooled embeddings on an embedding
// server. What the server answered is told back (observe), so the next
// turn of a chat holds the tokens it generated.
class ServerDraw {
public:
    ServerDraw(std::uint64_t seed, const ServerSettings& settings, int vocab, int max_len);
    ServerOp next();
    void observe(const ServerOp& op, const nlohmann::json& observed);

    // What a kind's draw reads and draws from.
    const ServerSettings& settings() const { return settings_; }
    std::uint64_t below(std::uint64_t n);
    std::int64_t range(std::int64_t lo, std::int64_t hi);  // inclusive
    bool chance(double p);
    std::vector<int> tokens(int n);
    std::vector<float> lora_scales();  // a scale per adapter, each 0, 0.5 or 1
    Completion completion(int slot);  // a request pinned to `slot` (-1: none), its prompt drawn from the conversations
    bool saved(int file) const;
    static constexpr int kFiles = 3;

private:
    struct Turn {
        std::vector<int> prompt, answer;
    };
    void heard(const Completion& c, const ServerAnswer& a);
    ServerSettings settings_;
    int vocab_, max_len_;
    std::vector<int> shared_;            // the few-shot prefix
    std::vector<Turn> last_;             // per slot: its last prompt and answer
    std::vector<std::optional<Turn>> files_;
    Rng rng_;
};

}  // namespace kvweld::sim::server
