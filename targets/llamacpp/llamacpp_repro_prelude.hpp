// The fixed part of every llama.cpp reproducer (llamacpp_repro.cpp writes
// the rest: the model's dims, the settings, the trace's calls): a GGUF
// writer and a seeded model, so the program needs no file of kvweld's; the
// engine and its ground truth as two contexts of one model; the checks and
// the verdict. C++17 against llama.h alone and llama_compat.hpp (whose
// text a reproducer carries: C++20, for every release kvweld drives) or
// llama_newest.hpp (an upstream-style test's: C++17, the newest llama.h).
//
// A program carries this text stripped to what it uses, as syzkaller's C
// reproducers carry its executor's common code: a block under
// `#if KVWELD_USES(F)` stays where the program uses F (targets/strip_features.hpp
// names the features). Compiled as a header every block is in, and CI
// compiles it so (llamacpp_repro_prelude_check.cpp). Every line here is a
// line of some program, and a program has at most 200 (ctest checks each
// finding's): a reason goes in a comment of its own line, which the strip
// drops.
#pragma once

#ifndef KVWELD_USES
#define KVWELD_USES(feature) 1
#endif

#include "targets/llamacpp/llama_compat.hpp"

#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>
#if KVWELD_USES(SAMPLER)
#include <utility>
#endif

#if KVWELD_USES(WARMUP)
// llama_set_warmup is deprecated in llama.h, and still the only way to switch warmup.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace compat = kvweld::llama_compat;

// A seeded random model of the llama architecture, written by gguf.h (F32 tensors, no vocabulary).

struct Dims { int dim, layers, heads, kv_heads, head_dim, ffn, vocab, ctx_train, experts, experts_used; float rope_theta, norm_eps; };

// splitmix64, uniform in [-scale, scale).
inline std::vector<float> random_floats(uint64_t seed, uint64_t n, float scale) {
    std::vector<float> out(n);
    for (float& x : out) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL), z = ((z ^ (z >> 27)) * 0x94d049bb133111ebULL);
        x = (float((z ^ (z >> 31)) >> 40) / float(1 << 23) - 1.0f) * scale;
    }
    return out;
}

// The program's own files (the model, its adapters), removed at its end.
inline std::string dir;

// A GGUF file's keys and tensors; each tensor random, scaled by
// gain/sqrt(ne[0]) (its input width), or with gain 0 all ones (a norm's).
struct Gguf {
    gguf_context* g = gguf_init_empty();
    ggml_context* meta = ggml_init({ggml_tensor_overhead() * 4096, nullptr, true});
    std::vector<std::vector<float>> data;  // each tensor's, until written
    uint64_t seed = 1;
    void tensor(const std::string& name, std::vector<int64_t> ne, float gain = 1.0f) {
        ggml_tensor* t = ggml_new_tensor(meta, GGML_TYPE_F32, int(ne.size()), ne.data());
        ggml_set_name(t, name.c_str());
        const uint64_t n = uint64_t(ggml_nelements(t));
        t->data = data.emplace_back(gain == 0 ? std::vector<float>(n, 1.0f) : random_floats(seed++ * 7919, n, gain / std::sqrt(float(ne[0])))).data();
        gguf_add_tensor(g, t);
    }
    bool write(const std::string& path) {
        const bool ok = gguf_write_to_file(g, path.c_str(), false);
        return gguf_free(g), ggml_free(meta), ok;
    }
};

inline bool write_model(const std::string& path, const Dims& d) {
    Gguf m;
    gguf_set_val_str(m.g, "general.architecture", "llama");
    gguf_set_val_str(m.g, "tokenizer.ggml.model", "none");
    // The expert counts are written only for a mixture of experts (0: none).
    for (const auto& [k, v] : {std::pair{"vocab_size", d.vocab}, {"context_length", d.ctx_train}, {"embedding_length", d.dim}, {"block_count", d.layers},
                               {"feed_forward_length", d.ffn}, {"attention.head_count", d.heads}, {"attention.head_count_kv", d.kv_heads},
                               {"rope.dimension_count", d.head_dim}, {"expert_count", d.experts}, {"expert_used_count", d.experts_used}})
        if (v > 0) gguf_set_val_u32(m.g, (std::string("llama.") + k).c_str(), uint32_t(v));
    gguf_set_val_f32(m.g, "llama.attention.layer_norm_rms_epsilon", d.norm_eps);
    gguf_set_val_f32(m.g, "llama.rope.freq_base", d.rope_theta);
    const int64_t D = d.dim, Q = int64_t(d.heads) * d.head_dim, K = int64_t(d.kv_heads) * d.head_dim, F = d.ffn;
    m.tensor("token_embd.weight", {D, d.vocab});
    for (int l = 0; l < d.layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        // The norms all ones (they draw no seed), and sharp attention (q and k
        // scaled up): a wrong position shows in the rows.
        m.tensor(b + "attn_norm.weight", {D}, 0), m.tensor(b + "ffn_norm.weight", {D}, 0);
        m.tensor(b + "attn_q.weight", {D, Q}, 4), m.tensor(b + "attn_k.weight", {D, K}, 4);
        m.tensor(b + "attn_v.weight", {D, K}), m.tensor(b + "attn_output.weight", {Q, D});
#if KVWELD_USES(MOE)
        if (const int64_t E = d.experts; E > 0) {
            m.tensor(b + "ffn_gate_inp.weight", {D, E}), m.tensor(b + "ffn_gate_exps.weight", {D, F, E});
            m.tensor(b + "ffn_up_exps.weight", {D, F, E}), m.tensor(b + "ffn_down_exps.weight", {F, D, E});
            continue;
        }
#endif
        m.tensor(b + "ffn_gate.weight", {D, F}), m.tensor(b + "ffn_up.weight", {D, F}), m.tensor(b + "ffn_down.weight", {F, D});
    }
    m.tensor("output_norm.weight", {D}, 0), m.tensor("output.weight", {D, d.vocab});
    return m.write(path);
}

#if KVWELD_USES(LORA)
// A LoRA adapter of `rank` on each named matrix of every layer, written and
// loaded (nullptr: it did not load).
struct LoraMatrix { const char* name; int64_t n_out, n_in; };
inline llama_adapter_lora* load_lora(llama_model* model, const Dims& d, uint64_t seed, int rank, float alpha, const std::vector<LoraMatrix>& matrices) {
    Gguf a;
    a.seed = seed;
    for (const auto& [k, v] : {std::pair{"general.architecture", "llama"}, {"general.type", "adapter"}, {"adapter.type", "lora"}}) gguf_set_val_str(a.g, k, v);
    gguf_set_val_f32(a.g, "adapter.lora.alpha", alpha);
    for (int l = 0; l < d.layers; ++l)
        for (const LoraMatrix& m : matrices) {
            const std::string name = "blk." + std::to_string(l) + "." + m.name + ".weight.lora_";
            a.tensor(name + "a", {m.n_in, rank}), a.tensor(name + "b", {rank, m.n_out});
        }
    // One file for every adapter: each is read whole before the next is written.
    return a.write(dir + "/lora.gguf") ? llama_adapter_lora_init(model, (dir + "/lora.gguf").c_str()) : nullptr;
}
#endif

// ---- The engine as a server runs it, and its ground truth: two contexts of one model ----

// The trace line being run, and the model's vocabulary size.
inline int line = 0, n_vocab = 0;

// One value read back (a logit, an embedding, a sampled token), and the trace line of its call.
struct Out { double value; int line; const char* what; };

struct Side {
    explicit Side(llama_context* c) : ctx(c) {}
    llama_context* ctx;
    // Every value its decode calls read back, in order.
    std::vector<Out> out;
    // The first call it refused, and where; it makes no call after it.
    std::string refused;
#if KVWELD_USES(STATE)
    std::vector<std::vector<uint8_t>> states;
#endif
#if KVWELD_USES(SAMPLER)
    // Backend sampler chains per sequence (llama_set_sampler; nullptr: none), up to llama.cpp's LLAMA_MAX_SEQ.
    llama_sampler* chains[256] = {};
#endif
#if KVWELD_USES(EMBD)
    // llama_set_embeddings as last set.
    bool embeddings = false;
#endif
#if KVWELD_USES(ABORT)
    // The abort callback, armed for the next llama_decode (-1: not).
    int abort_after = -1, abort_asked = 0;
#endif
    llama_memory_t mem() const { return llama_get_memory(ctx); }
};

// Those that refused no call yet, to run trace line n.
inline std::vector<Side*> live(std::vector<Side*> sides, int n) {
    line = n;
    sides.erase(std::remove_if(sides.begin(), sides.end(), [](Side* s) { return !s->refused.empty(); }), sides.end());
    return sides;
}

inline void expect(Side& s, bool ok, const std::string& what) {
    if (!ok && s.refused.empty()) s.refused = what + " (trace line " + std::to_string(line) + ")";
}

// The model written and loaded, llama.cpp's errors on stderr (nullptr: it
// did not load). llama.cpp aborting the process (GGML_ASSERT, GGML_ABORT) is
// a finding shown: its message is above; the handler names where, exit 1.
inline llama_model* start(const Dims& d) {
    std::signal(SIGABRT, [](int) { dprintf(2, "FINDING SHOWN: llama.cpp aborted the process at trace line %d: exit 1\n", line), _exit(1); });
    llama_backend_init();
    llama_log_set([](ggml_log_level level, const char* text, void*) { if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr); }, nullptr);
    char tmp[] = "/tmp/kvweld-repro-XXXXXX";
    dir = mkdtemp(tmp) ? tmp : ".";
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0, n_vocab = d.vocab;
    return write_model(dir + "/model.gguf", d) ? llama_model_load_from_file((dir + "/model.gguf").c_str(), mp) : nullptr;
}

// Each sequence n_ctx positions, as the engine was given; a call in several
// ubatches where n_ubatch is below n_batch; with pooling, each row's
// embeddings are its sequence's (llama_get_embeddings_seq).
inline llama_context* open_context(llama_model* model, uint32_t n_ctx, uint32_t seqs, bool unified, bool graph_reuse,
                                   float rope_scale, uint32_t n_ubatch, enum llama_pooling_type pooling) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx * seqs, cp.n_seq_max = seqs, cp.n_batch = 512, cp.n_ubatch = n_ubatch, cp.pooling_type = pooling, cp.kv_unified = unified;
    cp.n_threads = cp.n_threads_batch = 1, cp.type_k = cp.type_v = GGML_TYPE_F32, cp.rope_freq_scale = rope_scale, cp.no_perf = false;
    compat::set_flash_attn(cp, false);
#if KVWELD_USES(SAMPLER)
    // Backend sampling of every output row, as the engine was run.
    compat::sample_every_output(cp);
#endif
    // Read when a context is made.
    setenv("LLAMA_GRAPH_REUSE_DISABLE", graph_reuse ? "0" : "1", 1);
    llama_context* ctx = llama_init_from_model(model, cp);
    return unsetenv("LLAMA_GRAPH_REUSE_DISABLE"), ctx;
}

inline void keep(Side& s, const float* values, int n, const char* what) {
    for (int j = 0; j < n; ++j) s.out.push_back({values[j], line, what});
}

#if KVWELD_USES(SAMPLER)
// A row of a sequence with a sampler chain: its sampled token (llama.cpp
// need not copy the row's logits back). False: the sequence has no chain.
inline bool keep_sampled(Side& s, int seq, int32_t i) {
    if (!s.chains[seq]) return false;
    const llama_token token = llama_get_sampled_token_ith(s.ctx, i);
    expect(s, token >= 0, "llama_get_sampled_token_ith: no token for batch index " + std::to_string(i) + ", whose sequence has a sampler chain");
    if (token >= 0) llama_sampler_accept(s.chains[seq], token);
    return s.out.push_back({double(token), line, "sampled token"}), true;
}
#endif

struct Tok { int seq, token, pos, out; };

// Each output row's values: its embeddings with them on (its own, or its
// sequence's pooled), then its sampled token or else its logits.
inline void decode(Side& s, const std::vector<Tok>& toks) {
    llama_batch b = llama_batch_init(int32_t(toks.size()), 0, 1);
    for (size_t i = 0; i < toks.size(); ++i) {
        b.token[i] = toks[i].token, b.pos[i] = toks[i].pos, b.logits[i] = int8_t(toks[i].out);
        b.n_seq_id[i] = 1, b.seq_id[i][0] = toks[i].seq;
    }
    b.n_tokens = int32_t(toks.size());
#if KVWELD_USES(ABORT)
    const bool armed = s.abort_after >= 0;
    s.abort_asked = 0;
#endif
    const int32_t rc = llama_decode(s.ctx, b);
    llama_batch_free(b);
#if KVWELD_USES(ABORT)
    s.abort_after = -1;
    // Stopped by the abort callback: llama_decode returns 2, and nothing is read.
    if (armed && rc == 2) return;
#endif
    expect(s, rc == 0, "llama_decode returned " + std::to_string(rc));
    for (int32_t i = 0; rc == 0 && i < int32_t(toks.size()); ++i) {
        if (!toks[i].out) continue;
#if KVWELD_USES(EMBD)
        if (s.embeddings) {
            const bool pooled = llama_pooling_type(s.ctx) != LLAMA_POOLING_TYPE_NONE;
            const float* e = pooled ? llama_get_embeddings_seq(s.ctx, toks[i].seq) : llama_get_embeddings_ith(s.ctx, i);
            expect(s, e, "llama_get_embeddings_" + std::string(pooled ? "seq" : "ith") + " returned NULL for batch index " + std::to_string(i));
            if (e) keep(s, e, llama_model_n_embd(llama_get_model(s.ctx)), "embedding");
        }
#endif
#if KVWELD_USES(SAMPLER)
        if (keep_sampled(s, toks[i].seq, i)) continue;
#endif
        keep(s, llama_get_logits_ith(s.ctx, i), n_vocab, "logit");
    }
}

#if KVWELD_USES(ABORT)
// The abort callback: yes from its abort_after-th question on (the CPU
// backend asks after each graph node), as the plugin answers.
inline bool abort_check(void* data) {
    Side* s = static_cast<Side*>(data);
    return s->abort_after >= 0 && s->abort_asked++ >= s->abort_after;
}

// After an aborted call, each sequence holds a prefix of what it was
// given (llama.h); kvweld's run read these lengths back from its engine.
inline void expect_kept(Side& s, const std::vector<std::pair<int, int>>& lengths) {
    for (const auto& [seq, n] : lengths) {
        const int held = int(llama_memory_seq_pos_max(s.mem(), seq)) + 1;
        expect(s, held == n, "after the aborted llama_decode, sequence " + std::to_string(seq) + " holds " + std::to_string(held) + " positions where kvweld's run kept " + std::to_string(n));
    }
}
#endif

#if KVWELD_USES(SAMPLER)
// Backend sampler chains: greedy, or top_k then dist; set anew
// (llama_set_sampler), or the one set changed in place (the same object
// emptied and refilled, not given again: a context takes a chain once).
// The context holds a new chain, and the one it replaces is freed.
inline void set_chain(Side& s, int seq, int top_k, uint32_t seed, bool in_place) {
    llama_sampler* chain = in_place ? s.chains[seq] : llama_sampler_chain_init(llama_sampler_chain_default_params());
    while (llama_sampler_chain_n(chain) > 0) llama_sampler_free(llama_sampler_chain_remove(chain, 0));
    llama_sampler_chain_add(chain, top_k == 0 ? llama_sampler_init_greedy() : llama_sampler_init_top_k(top_k));
    if (top_k != 0) llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));
    if (in_place) return;
    expect(s, llama_set_sampler(s.ctx, seq, chain), "llama_set_sampler");
    llama_sampler_free(std::exchange(s.chains[seq], chain));
}
#endif

#if KVWELD_USES(CHAIN_CLEAR)
inline void clear_chain(Side& s, int seq) {
    if (s.chains[seq]) llama_set_sampler(s.ctx, seq, nullptr);
    llama_sampler_free(std::exchange(s.chains[seq], nullptr));
}
#endif

#if KVWELD_USES(STATE)
inline void save(Side& s, int seq, size_t id) {
    if (s.states.size() <= id) s.states.resize(id + 1);
    std::vector<uint8_t>& state = s.states[id];
    state.resize(llama_state_seq_get_size(s.ctx, seq));
    expect(s, llama_state_seq_get_data(s.ctx, state.data(), state.size(), seq) == state.size(), "llama_state_seq_get_data");
}

// A load is whole when llama.cpp read every byte and the sequence then holds positions 0 .. positions-1.
inline void load(Side& s, int seq, size_t id, int positions) {
    const std::vector<uint8_t>& state = s.states.at(id);
    const size_t read = llama_state_seq_set_data(s.ctx, state.data(), state.size(), seq);
    const llama_pos lo = llama_memory_seq_pos_min(s.mem(), seq), hi = llama_memory_seq_pos_max(s.mem(), seq);
    expect(s, read == state.size() && (positions == 0 ? hi < 0 : lo == 0 && hi + 1 == positions),
           "llama_state_seq_set_data read " + std::to_string(read) + " of " + std::to_string(state.size()) + " bytes and the sequence holds positions " + std::to_string(lo) + ".." + std::to_string(hi) + ", for a state of " + std::to_string(positions));
}
#endif

// ---- The verdict: the values both sides read, compared in order; the graphs each reused; what each refused ----

inline int report(Side& engine, Side& truth, double tolerance) {
    size_t n = std::min(engine.out.size(), truth.out.size()), at = 0;
    double worst = -1;
    // A NaN is worse than any number.
    for (size_t j = 0; j < n; ++j)
        if (const double d = std::fabs(engine.out[j].value - truth.out[j].value); d > worst || d != d) worst = d, at = j;
    std::printf("values compared: %zu (the engine read %zu, the ground truth %zu)\n", n, engine.out.size(), truth.out.size());
    if (worst != -1) std::printf("max |%s - expected| = %.6g (tolerance %g) at trace line %d: engine %.6g, expected %.6g\n", engine.out[at].what, worst, tolerance, engine.out[at].line, engine.out[at].value, truth.out[at].value);
    bool shown = worst != -1 && !(worst <= tolerance);
    const int reused = llama_perf_context(engine.ctx).n_reused, expected = llama_perf_context(truth.ctx).n_reused;
#if KVWELD_USES(REUSE)
    // The engine must reuse its graph as often as the ground truth.
    shown = shown || reused < expected;
#endif
    std::printf("graphs reused: engine %d, ground truth %d\n", reused, expected);
    for (const Side* s : {&engine, &truth})
        if (!s->refused.empty()) std::printf("the %s refused %s\n", s == &engine ? "engine" : "ground truth", s->refused.c_str());
    if (!truth.refused.empty() && engine.refused.empty()) return std::printf("INCONCLUSIVE: the ground truth refused a call the engine did not\n"), 2;
    shown = shown || (!engine.refused.empty() && truth.refused.empty());
    std::printf("%s\n", shown ? "FINDING SHOWN: exit 1" : "not shown: exit 0");
    return shown ? 1 : 0;
}
