// The one engine interface the simulator drives (llama.cpp's llama_memory_i
// is the model: one interface, several implementations). An engine opens
// sequences, decodes batches of (sequence, token) pairs into one row of
// logits each, rewinds, clears and copies sequences, and declares the rest
// as capabilities (the KVWELD_CAP_* bits of include/kvweld/engine_abi.h):
// plan counters and identity, reload, storage reports and KV read-back,
// layer swaps, a paged pool, LoRA adapters and a control vector, context
// shifts and state save and load. Every failure is an Error naming the engine
// and what went wrong; a refused call changes nothing.
//
// Implementations: DenseEngine (targets/kvweld/dense_engine.hpp), kvweld's
// engine in this process, with the white-box capabilities only a process
// of its own can have (targets/white_box.hpp); and PluginEngine
// (targets/plugin_host.hpp), any engine behind the plugin ABI, kvweld's
// own plugins and llama.cpp among them.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"
#include "engine/sampling.hpp"
#include "targets/memory_call.hpp"
#include "targets/white_box.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "kvweld/engine_abi.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvweld::targets {

// What an engine is opened with besides its model: its settings
// ("k=v,..."), the sequences open at once, the positions each holds, and
// its threads.
// Reuse rules and block models are built from the same.
// How far an engine's rows may lie from its twin's (logit_error; 0: bit
// for bit), and why, where the engine is not bitwise reproducible across
// instances in some state.
struct TwinTolerance {
    double tolerance = 0.0;
    const char* why = nullptr;
};

// ABI 12: a decode the abort callback stopped part way (KVWELD_ABORTED):
// what it kept is read back with Engine::seq_length.
struct Aborted : Error {
    using Error::Error;
};

// An engine run in a process of its own (targets/isolation/) whose process
// died or hung during a call: the engine is gone, and every later call
// throws the same. `title` names the crash the way syzkaller titles one
// (the last line the process wrote, or its signal; "hang in decode"): a
// known finding matches a crash by it.
struct Crashed : Error {
    Crashed(const std::string& message, std::string crash_title) : Error(message), title(std::move(crash_title)) {}
    std::string title;
    // The contract clause a failure of it carries (sim::Failure::clause).
    std::string clause() const { return "crash: " + title; }
};

// Where a plugin's engine runs: in kvweld's process, or in one of its own
// (targets/isolation/), so that its abort, signal or hang is a finding and
// the run goes on; engine_default is the registry row's choice
// (EngineEntry::isolated: llama.cpp's).
enum class Isolate : std::uint8_t { engine_default, no, yes };
struct Isolation {
    Isolate isolate = Isolate::engine_default;
    int call_timeout_ms = 60000;  // in a process of its own: a call not answered by then is a hang
};

struct EngineSetup {
    std::string params;
    int seqs = 1;
    int n_ctx = 64;
    int threads = 1;  // the engine's decode threads
    Isolation isolation = {};
};

class Engine {
public:
    virtual ~Engine() = default;

    virtual std::string name() const = 0;
    virtual std::uint32_t capabilities() const = 0;  // KVWELD_CAP_*
    virtual std::string model_format() const = 0;  // how a model is handed over: "llama2c" or "gguf"
    virtual int vocab() const = 0;

    // One row of vocab() logits per (seqs[i], tokens[i]) pair, back to back;
    // with `outputs` (KVWELD_CAP_OUTPUTS; empty: every pair), only for the
    // pairs with outputs[i] != 0. Every pair's KV is written either way.
    virtual std::vector<float> decode(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens,
                                      std::span<const std::uint8_t> outputs) = 0;
    std::vector<float> decode(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens) {
        return decode(seqs, tokens, {});
    }
    // Every memory call a server makes between decodes, as its one value
    // (targets/memory_call.hpp): open, close, truncate, clear, copy, shift,
    // reload, adapters, live settings, samplers and the rest. Each engine
    // visits it exhaustively, so a new call kind fails to compile in every
    // engine until it handles or refuses it. A call of a capability the
    // engine does not declare is an Error naming it; a state save or load
    // moves bytes the caller holds, through state_save and state_load.
    virtual void apply(const MemoryCall& call) = 0;
    // KVWELD_CAP_STATE: a sequence's state as bytes, in the engine's own
    // format; and such bytes loaded into an open sequence, replacing what it
    // held. A state of another model or shape, or corrupt bytes, is an Error
    // and the sequence keeps what it held.
    virtual std::vector<std::uint8_t> state_save(int seq) = 0;
    virtual void state_load(int seq, std::span<const std::uint8_t> bytes) = 0;
    // Capabilities: each throws Error when the engine does not declare it.
    // KVWELD_CAP_STORAGE; which: KVWELD_STORAGE_HELD or _PLAN
    virtual std::vector<std::uint64_t> storage(int seq, int which, int n_layers) const = 0;
    virtual void read_kv(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const = 0;  // READ_KV
    virtual std::optional<kvweld_engine_counters> counters() const = 0;  // nullopt without PLAN_COUNTERS
    virtual std::uint64_t plan_serial(int seq) const = 0;          // KVWELD_CAP_PLAN_SERIAL
    // Paged KV (KVWELD_CAP_BLOCKS, KVWELD_CAP_POOL_OPS).
    virtual kvweld_pool_info pool_info() const = 0;
    virtual std::vector<int> block_table(int seq) const = 0;
    virtual int block_refcount(int block) const = 0;
    // ABI 9, the settings a server changes between decodes (calls::SetLive),
    // each with the values a swarm may draw ("n_threads:1|2"; "": none).
    virtual std::string live_settings() const { return ""; }
    // KVWELD_CAP_EMBEDDINGS (ABI 10), with the live setting embeddings=1:
    // output row `row` of the last decode call's hidden state after the
    // final norm (n_embd floats: the model's dim). An Error names a row past
    // the outputs, another n_embd, or embeddings off.
    virtual std::vector<float> embeddings(int row, int /*n_embd*/) const {
        throw Error(cat("engine ", name(), " reads back no embeddings (row ", row, ")"));
    }
    // KVWELD_CAP_SAMPLERS (ABI 11; the chains are calls::SetSampler): the
    // token sampled for output row `row` of the last decode call (-1: its
    // sequence had no chain).
    virtual int sampled(int row) const {
        throw Error(cat("engine ", name(), " samples no tokens (row ", row, ")"));
    }
    // KVWELD_CAP_ABORT (ABI 12): the abort callback for the next decode call
    // only, answering yes from its `after`-th question on (< 0: disarmed);
    // a call it stops throws Aborted. seq_length: the positions sequence
    // `seq` holds, read back from the engine's memory.
    virtual void set_abort(int after) {
        throw Error(cat("engine ", name(), " has no abort callback (after ", after, ")"));
    }
    virtual int seq_length(int seq) const {
        throw Error(cat("engine ", name(), " reports no sequence length (sequence ", seq, ")"));
    }
    // The twin tolerance in the engine's present state (ABI 6 twin_tolerance).
    virtual TwinTolerance twin_tolerance() const { return {}; }
    // The white-box capabilities (nullptr: none, as behind any plugin).
    virtual WhiteBox* white_box() { return nullptr; }
};

}  // namespace kvweld::targets
