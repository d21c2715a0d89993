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
#include "engine/kv_type.hpp"
#include "engine/model.hpp"
#include "sim/server/prompt_cache.hpp"
#include "sim/server/server_exchange.hpp"
#include "sim/server/server_ops.hpp"
#include "sim/server/server_settings.hpp"
#include "sim/server/slot_states.hpp"
#include "targets/llamaserver/server_process.hpp"
#include "util/rng.hpp"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::sim::server {

class ServerOracle;


struct ServerRunConfig {
    std::string server;           // the llama-server binary
    std::string preset = "small"; // the random model's dims
    std::uint64_t seed = 1;       // its weights (and, generated, the settings and requests)
    ServerSettings settings;
    std::string work_dir;         // the model, the servers' logs, the slot files
    bool lockstep = true;         // a ground-truth server beside it
    double request_timeout_s = 60;
};

// The server's model file at `path`: kvweld's llama model (Vocab::test),
// or for another arch the model of its shape that this build's
// kvweld-arch-model makes (targets::arch_model_writer), its weights from
// `seed`, the window its sliding window's: a server loads files only. An
// Error quoting the writer's log where it fails, or naming why this build
// has no writer.
void write_server_model(const Model& model, const std::string& arch, int window, std::uint64_t seed, const std::string& path,
                        double timeout_s);

enum class ServerVerdict { pass, fail, server_error };
std::string_view to_string(ServerVerdict v);

struct ServerFailure {
    std::size_t op = 0;   // its index in the run
    std::string oracle;   // which oracle, or "server"
    std::string message;
};


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
    void run(const During& op, std::size_t index, nlohmann::json& observed);
    // One completion request sent and its answers parsed (several for
    // n_cmpl); `watch`, where given, is shown a stream's bytes after each read.
    std::vector<ServerAnswer> send(const Completion& c, const std::string& what,
                                   const std::function<void(const std::string&)>& watch);
    std::vector<ServerAnswer> send(const Completion& c, const std::string& what) { return send(c, what, {}); }
    void judge_completion(const Completion& c, const std::vector<ServerAnswer>& answers, std::size_t index);
    void post_lora(const Lora& op, std::size_t index);  // POST /lora-adapters
    void judge_lora(const Lora& op, std::size_t index);
    void fail(std::size_t index, const std::string& oracle, const std::string& message);

    ServerRunConfig config_;
    Model model_;
    std::unique_ptr<targets::llamaserver::ServerProcess> process_;
    std::vector<std::unique_ptr<ServerOracle>> oracles_;
    std::optional<ServerFailure> failure_;
    bool server_error_ = false;
    std::array<long, kServerOpKinds> ops_run_{};
    ServerTally chosen_;  // which oracles this run has, and why not the others
    std::vector<long> variants_sent_;  // ops sent, per row of kServerOpVariants
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
    // Whether `c` fills its slot's context (the model's): a context shift, or the server stops it.
    bool fills_slot(const Completion& c) const;
    static constexpr int kFiles = 3;

private:
    // A slot's conversation: its last prompt and answer. The draw follows
    // conversations, not KV: a copy's (n_cmpl) answer is a turn a client
    // goes on from, though the server releases the copy's cells; slot
    // actions move a conversation as they move KV (the one slot model).
    struct Turn {
        std::vector<int> prompt, answer;
        void clear() { *this = {}; }
    };
    void heard(const Completion& c, const ServerAnswer& a);
    ServerSettings settings_;
    int vocab_, max_len_;
    std::vector<int> shared_;  // the few-shot prefix
    SlotStates<Turn> turns_;
    Rng rng_;
};

}  // namespace kvweld::sim::server
