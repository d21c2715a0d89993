// A server run's settings, the server's command line a seed draws
// (sim/server/server_settings.cpp). Beneath the simulator, its oracles, the
// draw, the script writer, the traffic study and the known findings, which
// each take them whole.
#pragma once

#include "engine/kv_type.hpp"
#include "sim/server/prompt_cache.hpp"
#include "targets/llamacpp/llama_arch_list.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace kvweld::sim::server {

// The server's command line a seed draws: slots, unified KV or one stream
// per slot, chunk reuse, the host-RAM prompt cache, and whether it serves
// completions or pooled embeddings, the KV type. Fixed for every seed:
// flash attention off (the reference's numbers), a slot save path, one thread.
// No field has a default, and the build makes a missing initializer an
// error (-Werror=missing-field-initializers): a new field fails to compile
// at each place that makes settings until it chooses the field's value.
// Its JSON name, its range, the value a trace written before it had, and
// its simplest value (the shrinker's) are one row of kServerSettingsFields
// (server_settings.cpp), which to_json, from_json and simpler() read.
struct ServerSettings {
    int slots;
    bool unified;
    int cache_reuse;         // --cache-reuse (0: off)
    std::string pooling;     // "" completions; "mean" or "last": --embedding --pooling P
    int ctx_extra;           // -c is slots * the model's context, plus this (0 .. slots - 1: a context the slots do not divide)
    int loras;               // LoRA adapters (--lora each; the server's own scales start at kServerLoraScale)
    int cache_ram;           // --cache-ram: 0 off, -1 no size limit, 8192 the server's default (MiB)
    bool idle_slots;         // --cache-idle-slots (with a RAM cache; the server's default)
    int draft;               // -md: 0 none; 1 a draft with the model's weights (its drafts accepted); 2 other weights (mostly rejected)
    bool context_shift;      // --context-shift: a full slot drops half its tokens past n_keep and goes on
    KvType kv_type;          // -ctk/-ctv (16-bit rows: the reference rounds as ggml does)
    // The model's architecture, given by the run (--params arch=NAME), not
    // drawn: llama, or one of llama.cpp's other memories
    // (targets/llamacpp/llama_arch_list.hpp), whose file kvweld-arch-model
    // writes. The four below are the other memories' (a llama model's KV
    // cache rolls back, so the server makes no checkpoints): not on the
    // command line with llama.
    std::string arch;
    int window;              // the sliding window of an arch that has one (its model's)
    bool swa_full;           // --swa-full: a full-size sliding-window cache, which can shift
    int ctx_checkpoints;     // --ctx-checkpoints: per slot, 0 none (the server's default 32)
    int checkpoint_min_step; // --checkpoint-min-step: tokens between two (the server's default 8192; 0 none)
    // --spec-type ngram-simple: drafts looked up in the slot's own tokens,
    // no draft model; a recurrent or hybrid memory rolls a rejected draft
    // back through a checkpoint of its own (server-context.cpp:3262-3304).
    bool ngram;
    bool operator==(const ServerSettings&) const = default;

    // Drawn for the model `arch` (a llama seed draws what it drew before the other archs).
    static ServerSettings draw(std::uint64_t seed, const std::string& arch);
    bool embeddings() const { return !pooling.empty(); }
    bool llama() const { return arch == "llama"; }
    std::vector<std::string> flags() const;  // the drawn flags but -c (it depends on the model)
    std::string describe() const;            // the drawn settings, in a line
    // The RAM cache as the oracles model it, for a model of context `model_ctx`.
    PromptCacheSettings prompt_cache(int model_ctx) const;
    int ctx(int model_ctx) const { return model_ctx * slots + ctx_extra; }  // -c
    // A slot's context: the library's per-sequence one, capped at the
    // model's training context (server-context.cpp n_ctx_slot).
    int slot_ctx(int model_ctx) const;
    int shift_ctx(int model_ctx) const { return context_shift ? slot_ctx(model_ctx) : 0; }
    double tolerance() const { return kv_tolerance(kv_type); }  // the oracles' |logprob - reference| and |embedding - reference|
    nlohmann::json to_json() const;
    static ServerSettings from_json(const nlohmann::json& j);  // strict: throws Error naming the field
    // Each field at its simplest value where it is not (one candidate per
    // field), those that are valid settings: the shrinker's.
    std::vector<ServerSettings> simpler() const;
};

// Whether a seed draws the field `name` for a model of `arch` (the arch is
// given; a llama server has no window or checkpoints; an arch without a
// sliding window no window).
bool is_drawn(const std::string& name, const std::string& arch);

// kvweld's architectures, "llama, granite_swa, ...", for errors and --help.
std::string arch_names();
// The architecture kvweld names `name` (llama_arch_list.hpp); throws Error
// naming them all where it is none.
const llamacpp::ArchModel& arch_named(const std::string& name);

// Where a server's files are: its slot files' folder, each LoRA adapter
// (settings.loras of them), the draft model ("" without one). The
// simulator gives paths; the script writer gives its shell's words.
struct ServerFiles {
    std::string slot_dir;
    std::vector<std::string> loras;
    std::string draft;
};
// The one command line but -m, for the server under test, its ground
// truth and a finding's script alike: the settings' flags, and those every
// seed's server gets (flash attention off, the reference's numbers; one
// thread; no warmup; the slots endpoint, to wait out a cancelled request).
std::vector<std::string> server_args(const ServerSettings& s, int model_ctx, const ServerFiles& files);
// The ground truth's: one slot of the same context, caching off, the same
// KV type, context shift and adapters, no draft model.
std::vector<std::string> ground_truth_args(const ServerSettings& s, int model_ctx, const ServerFiles& files);

}  // namespace kvweld::sim::server
