// What kvweld's two engine plugins (dense: kvweld_engine_plugin.cpp, paged:
// kvweld_paged_plugin.cpp) share: the model loaded from the GGUF file the
// harness wrote, the engine's options and fault switches,
// reload, the fault list each design can reach through the ABI, and the
// adapters and control vector as the ABI hands them over.
#pragma once

#include "targets/abi_guard.hpp"
#include "targets/abi_lists.hpp"
#include "engine/adapters.hpp"
#include "engine/gguf.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "engine/recycling_resource.hpp"
#include "kvweld/engine_abi.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::abi {

struct PluginBase {
    // Declared first, so it outlives the model: a reloaded model lands at
    // its predecessor's address, as in kvweld's own simulator, so a plan
    // keyed by the weights' address is fooled (weight_pointer_key).
    std::unique_ptr<RecyclingResource> pool = std::make_unique<RecyclingResource>();
    std::optional<Model> model;  // always set; optional so a reload can free it first
    int n_ctx = 0, n_seq_max = 0, threads = 1;
    FaultSet faults;  // installed around every call (they are per thread)
};

// Every call runs with the engine's fault switches on, on the caller's thread.
template <class Fn>
int guarded(const PluginBase* e, char* err, size_t err_len, Fn&& fn) {
    return guarded(err, err_len, [&] {
        const ScopedFaults scoped(e->faults);
        fn();
    });
}

// An open sequence of either plugin's map; for a const engine, a const one.
template <class Engine>
auto& seq_of(Engine* e, int32_t seq) {
    const auto it = e->seqs.find(seq);
    require(it != e->seqs.end(), "sequence ", seq, " is not open");
    return it->second;
}

// Refuses a sequence id outside the engine's range or already open.
template <class Engine>
void require_openable(const Engine* e, int32_t seq) {
    require(seq >= 0 && seq < e->n_seq_max, "sequence ", seq, " out of range 0..", e->n_seq_max - 1);
    require(!e->seqs.count(seq), "sequence ", seq, " is already open");
}

// A batch is checked whole before any pair is decoded, so a refused call
// changes nothing: every sequence open, every token in the vocabulary, and
// no sequence fed past its n_ctx positions. `length(seq)` is its length now.
template <class Engine, class Length>
void require_batch(Engine* e, const int32_t* seqs, const int32_t* tokens, int32_t n, Length&& length) {
    require(n >= 0, "decode of ", n, " pairs");
    const int vocab = e->model->config().vocab;
    std::map<int32_t, int> fed;
    for (int32_t i = 0; i < n; ++i) {
        seq_of(e, seqs[i]);
        require(tokens[i] >= 0 && tokens[i] < vocab, "pair ", i, ": token ", tokens[i], " out of range 0..", vocab - 1);
        const int at = length(seqs[i]) + fed[seqs[i]]++;
        require(at < e->n_ctx, "pair ", i, ": sequence ", seqs[i], " is full: n_ctx is ", e->n_ctx);
    }
}

// copy_seq's own refusal: a sequence copied onto itself.
inline void require_distinct(int32_t src, int32_t dst) {
    require(src != dst, "copy_seq: source and destination are both sequence ", src);
}

// The faults `design` can show through this ABI, by `reachable`, each with
// the classes it may show as (the engine's fault table's): "name:a|b,...".
template <class Reachable>
std::string fault_names_for(Reachable&& reachable) {
    std::string out;
    if (kFaultsCompiled)
        for (const FaultInfo& f : all_faults())
            if (reachable(f)) out.append(out.empty() ? "" : ",").append(f.name).append(":").append(f.expected.describe());
    return out;
}

// Loads the model and checks the options; `allowed` is fault_names_for's
// list. Returns the settings given (ABI 16), for the plugin's params.
inline Given init_base(PluginBase& e, const kvweld_engine_options* o, const std::string& allowed) {
    require(o && o->model_path, "no options or model path");
    Given given = read_given(o);
    e.model.emplace(load_gguf(o->model_path, e.pool.get()));
    const int max_ctx = e.model->config().max_seq_len;
    require(o->n_ctx >= 1 && o->n_ctx <= max_ctx, "n_ctx = ", o->n_ctx, ": must be in 1..", max_ctx);
    require(o->n_seq_max >= 1 && o->n_seq_max <= 4096, "n_seq_max = ", o->n_seq_max, ": must be in 1..4096");
    e.n_ctx = o->n_ctx;
    e.n_seq_max = o->n_seq_max;
    e.threads = std::max(1, o->threads);
    for (const std::string& name : given.faults) {
        const auto f = fault_from_name(name);
        require(f && lists_fault(allowed.c_str(), name), "unknown fault '", name,
                "': this engine's faults are ", allowed.empty() ? "(none in this build)" : allowed);
        e.faults.add(*f);
    }
    return given;
}

// Replaces the model, the old one freed first so the new one can take its
// address; checked in full before, so a bad file loses nothing.
inline void reload_model(PluginBase& e, const char* path) {
    require(path != nullptr, "reload: no model path");
    Model checked = load_gguf(path);
    require(checked.config() == e.model->config(), "reload: ", path, " holds a model of another shape");
    e.model.reset();
    try {
        e.model.emplace(load_gguf(path, e.pool.get()));
    } catch (const Error&) {  // the file changed under us: keep what was checked
        e.model.emplace(std::move(checked));
    }
}

// Adapter files read, by path: a path names one adapter for the engine's
// life, so the same set set again is the same set (its id).
using LoraFiles = std::map<std::string, std::shared_ptr<const LoraAdapter>>;

// set_loras's arguments as uses, every file read (once per path) and
// checked against the model before anything changes.
inline std::vector<LoraUse> lora_uses(LoraFiles& read, const char* const* paths, const float* scales, int32_t n,
                                      const ModelConfig& config) {
    const std::vector<std::string> named = lora_paths(paths, scales, n);
    std::vector<LoraUse> uses;
    for (std::size_t i = 0; i < named.size(); ++i) {
        auto& adapter = read[named[i]];
        if (!adapter) adapter = load_gguf_lora(named[i], config);
        uses.push_back({adapter, scales[i]});
    }
    return uses;
}

// set_cvec's arguments (llama.cpp's layout: n_embd floats per layer from
// layer 1) as kvweld's vector; nullopt when data is NULL (clear).
inline std::optional<ControlVector> cvec_of(const float* data, size_t len, int32_t n_embd, int32_t il_start,
                                            int32_t il_end, const ModelConfig& c) {
    if (!data) return std::nullopt;
    require(n_embd == c.dim, "set_cvec: n_embd ", n_embd, " is not the model's ", c.dim);
    const std::size_t want = std::size_t(c.dim) * std::size_t(c.n_layers - 1);
    require(len == want, "set_cvec: len ", len, " floats: the model needs ", want, " (", c.n_layers - 1,
            " layers from layer 1, x ", c.dim, ")");
    ControlVector cv;
    cv.dim = c.dim;
    cv.start = il_start;
    cv.end = il_end;
    cv.data.assign(std::size_t(c.dim), 0.0f);  // layer 0 has none
    cv.data.insert(cv.data.end(), data, data + len);
    return cv;
}

}  // namespace kvweld::abi
