// The server simulator's operations (sim/server/server_sim.hpp): what
// clients do to a llama-server over HTTP. The library's op table
// (sim/ops.hpp) acts through the engine interface's memory calls; these act
// through requests, so they are a table of their own, built the same way:
// each kind is one struct below, holding its arguments, its name and its
// ServerOpKind; the variant ServerOpArgs lists them in that order; the rest
// of a kind is in its own file, sim/server/ops/<name>.cpp: its weight in a
// seed's settings, its draw, its JSON both ways (KVWELD_SERVER_OP_ROW) and
// what it does (ServerSim::run). A kind whose file lacks one does not link.
//
// An op holds what the client sends, whole (the prompt's tokens, not how
// they were drawn), so a trace replays without the generator and stays
// meaningful after shrinking. What the server chose (its slot, its cache
// hits, the tokens it generated) is not an argument: the run records it
// beside each op (ServerRun::observed), and a replay compares.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

namespace kvweld::sim::server {

class ServerSim;
class ServerDraw;
struct ServerSettings;

#define KVWELD_SERVER_OP_ROW(T)                           \
    static int weight(const ServerSettings& s);           \
    static T draw(ServerDraw& d);                          \
    static void write(nlohmann::json& j, const T& a);      \
    static T read(const nlohmann::json& j)

enum class ServerOpKind : std::uint8_t { complete, burst, slot, embed, lora, during };

// One completion request (POST /completion, prompt as token ids, greedy
// or seeded sampling, the top n_probs log probabilities of each token).
struct Completion {
    int slot = -1;               // id_slot; -1: the server chooses
    std::vector<int> prompt;     // token ids
    int n_predict = 1;
    int n_cmpl = 1;              // completions sharing the prompt (the server copies the sequence to other slots)
    bool stream = false;         // server-sent events
    int cancel_after = 0;        // streamed: the connection closed after this many tokens (0: read to the end)
    double temperature = 0;      // 0: greedy
    std::uint32_t seed = 0;      // the sampler's, where temperature > 0
    // The request's "lora": each of the server's adapters' scale, by id
    // (empty: no "lora" field, the server's own scales apply).
    std::vector<float> lora = {};
    // "n_keep": the tokens a context shift keeps at the front (-1: the
    // prompt); the rest's first half is discarded when the slot is full.
    int n_keep = 0;
};

// One request, alone.
struct Complete {
    static constexpr ServerOpKind kind = ServerOpKind::complete;
    static constexpr std::string_view name = "complete";
    KVWELD_SERVER_OP_ROW(Complete);
    Completion request;
};
// Several requests in flight at once (each on its own connection).
struct Burst {
    static constexpr ServerOpKind kind = ServerOpKind::burst;
    static constexpr std::string_view name = "burst";
    KVWELD_SERVER_OP_ROW(Burst);
    std::vector<Completion> requests;
};
// A slot's state saved to a file, restored from one (into any slot), or erased.
enum class SlotAction { save, restore, erase };
struct Slot {
    static constexpr ServerOpKind kind = ServerOpKind::slot;
    static constexpr std::string_view name = "slot";
    KVWELD_SERVER_OP_ROW(Slot);
    SlotAction action = SlotAction::save;
    int slot = 0;
    int file = 0;  // slot-<file>.bin in the server's --slot-save-path
};
// Pooled embeddings of one or more inputs in one request (POST /embedding;
// a server started with --embedding): the server spreads them over its slots.
struct Embed {
    static constexpr ServerOpKind kind = ServerOpKind::embed;
    static constexpr std::string_view name = "embed";
    KVWELD_SERVER_OP_ROW(Embed);
    std::vector<std::vector<int>> inputs;
};

// The server's own LoRA scales (POST /lora-adapters), for every request
// that names none.
struct Lora {
    static constexpr ServerOpKind kind = ServerOpKind::lora;
    static constexpr std::string_view name = "lora";
    KVWELD_SERVER_OP_ROW(Lora);
    std::vector<float> scales;  // each adapter's, by id
};

// A request sent while a stream runs, at a moment the stream defines: once
// its completion `index` has given `at_token` tokens, or once it has ended
// (at_token 0) while its siblings (n_cmpl) may still stream. The stream is
// pinned; what is sent then is a completion pinned to a slot, or the
// server's LoRA scales. llama-server runs a slot's tasks one after another
// (a request pinned to a busy slot waits), a request on an idle slot
// touches nothing the stream's slots hold but the host-RAM cache, and a
// stream's end leaves that cache alone without --cache-idle-slots (the
// only RAM cache this op is drawn with); a task takes the server's scales
// when it starts. So the oracles judge the stream, then what was sent,
// whatever the server interleaved; the trace records what the stream had
// given when it was sent.
struct During {
    static constexpr ServerOpKind kind = ServerOpKind::during;
    static constexpr std::string_view name = "during";
    KVWELD_SERVER_OP_ROW(During);
    Completion stream;  // streamed, pinned, read to its end
    int index = 0;      // which of its n_cmpl completions
    int at_token = 0;   // 0: when that completion ends
    std::variant<Completion, Lora> then;
};

using ServerOpArgs = std::variant<Complete, Burst, Slot, Embed, Lora, During>;
inline constexpr int kServerOpKinds = int(std::variant_size_v<ServerOpArgs>);
static_assert(int(ServerOpKind::during) + 1 == kServerOpKinds, "ServerOpKind and ServerOpArgs list the same kinds");

struct ServerOp {
    ServerOpArgs args;
    ServerOpKind kind() const {
        return std::visit([](const auto& a) { return std::decay_t<decltype(a)>::kind; }, args);
    }
};

std::string_view to_string(ServerOpKind kind);
std::string_view to_string(SlotAction action);
void to_json(nlohmann::json& j, const ServerOp& op);
ServerOp server_op_from_json(const nlohmann::json& j);  // strict: throws Error naming the field
// Completion's JSON both ways (Complete and Burst share it).
void write_completion(nlohmann::json& j, const Completion& c);
Completion read_completion(const nlohmann::json& j);
// A list of LoRA scales (at most 8, each in 0..4); throws Error naming the field.
std::vector<float> read_scales(const nlohmann::json& j, const char* field);

}  // namespace kvweld::sim::server
