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
// compiles it so (llamacpp_repro_prelude_check.cpp).
#pragma once

#ifndef KVWELD_USES
#define KVWELD_USES(feature) 1
#endif

#include "targets/llamacpp/llama_compat.hpp"

#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>
#if KVWELD_USES(SAMPLER)
#include <map>
#endif

#if KVWELD_USES(WARMUP)
// llama_set_warmup is deprecated in llama.h, and still the only way to switch warmup.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

// ---- A seeded random model of the llama architecture, written by gguf.h (F32 tensors, no vocabulary) ----

struct Dims {
    int dim, layers, heads, kv_heads, head_dim, ffn, vocab, ctx_train, experts, experts_used;
    float rope_theta, norm_eps;
};

inline std::vector<float> random_floats(uint64_t seed, uint64_t n, float scale) {  // splitmix64, uniform in [-scale, scale)
    std::vector<float> out(n);
    for (float& x : out) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL), z = ((z ^ (z >> 27)) * 0x94d049bb133111ebULL);
        x = (float((z ^ (z >> 31)) >> 40) / float(1 << 23) - 1.0f) * scale;
    }
    return out;
}

inline std::string dir;                 // the program's own files: the model and its adapters,
inline std::vector<std::string> files;  // removed at its end

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
        data.push_back(gain == 0 ? std::vector<float>(n, 1.0f) : random_floats(seed++ * 7919, n, gain / std::sqrt(float(ne[0]))));
        t->data = data.back().data();
        gguf_add_tensor(g, t);
    }
    bool write(const std::string& path) {
        files.push_back(path);
        const bool ok = gguf_write_to_file(g, path.c_str(), false);
        return gguf_free(g), ggml_free(meta), ok;
    }
};

inline bool write_model(const std::string& path, const Dims& d) {
    Gguf m;
    gguf_set_val_str(m.g, "general.architecture", "llama");
    for (const auto& [k, v] : {std::pair{"vocab_size", d.vocab}, {"context_length", d.ctx_train}, {"embedding_length", d.dim},
                               {"block_count", d.layers}, {"feed_forward_length", d.ffn}, {"attention.head_count", d.heads},
                               {"attention.head_count_kv", d.kv_heads}, {"rope.dimension_count", d.head_dim}})
        gguf_set_val_u32(m.g, (std::string("llama.") + k).c_str(), uint32_t(v));
    gguf_set_val_f32(m.g, "llama.attention.layer_norm_rms_epsilon", d.norm_eps);
    gguf_set_val_f32(m.g, "llama.rope.freq_base", d.rope_theta);
    gguf_set_val_str(m.g, "tokenizer.ggml.model", "none");
#if KVWELD_USES(MOE)
    if (d.experts > 0) {
        gguf_set_val_u32(m.g, "llama.expert_count", uint32_t(d.experts));
        gguf_set_val_u32(m.g, "llama.expert_used_count", uint32_t(d.experts_used));
    }
#endif
    const int64_t D = d.dim, Q = int64_t(d.heads) * d.head_dim, K = int64_t(d.kv_heads) * d.head_dim, F = d.ffn, V = d.vocab;
    m.tensor("token_embd.weight", {D, V});
    for (int l = 0; l < d.layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        // Sharp attention (q and k scaled up): a wrong position shows in the rows.
        for (const auto& [name, ne, gain] : std::vector<std::tuple<const char*, std::vector<int64_t>, float>>{
                 {"attn_norm", {D}, 0.0f}, {"attn_q", {D, Q}, 4.0f}, {"attn_k", {D, K}, 4.0f}, {"attn_v", {D, K}, 1.0f},
                 {"attn_output", {Q, D}, 1.0f}, {"ffn_norm", {D}, 0.0f}})
            m.tensor(b + name + ".weight", ne, gain);
#if KVWELD_USES(MOE)
        if (const int64_t E = d.experts; E > 0) {
            m.tensor(b + "ffn_gate_inp.weight", {D, E});
            m.tensor(b + "ffn_gate_exps.weight", {D, F, E});
            m.tensor(b + "ffn_up_exps.weight", {D, F, E});
            m.tensor(b + "ffn_down_exps.weight", {F, D, E});
            continue;
        }
#endif
        for (const auto& [name, ne] : std::vector<std::pair<const char*, std::vector<int64_t>>>{
                 {"ffn_gate", {D, F}}, {"ffn_up", {D, F}}, {"ffn_down", {F, D}}})
            m.tensor(b + name + ".weight", ne);
    }
    m.tensor("output_norm.weight", {D}, 0);
    m.tensor("output.weight", {D, V});
    return m.write(path);
}

#if KVWELD_USES(LORA)
// A LoRA adapter of `rank` on each named matrix of every layer ({name, n_out, n_in}).
struct LoraMatrix {
    const char* name;
    int64_t n_out, n_in;
};
inline bool write_lora(const std::string& path, const Dims& d, uint64_t seed, int rank, float alpha,
                       const std::vector<LoraMatrix>& matrices) {
    Gguf a;
    a.seed = seed;
    gguf_set_val_str(a.g, "general.architecture", "llama");
    gguf_set_val_str(a.g, "general.type", "adapter");
    gguf_set_val_str(a.g, "adapter.type", "lora");
    gguf_set_val_f32(a.g, "adapter.lora.alpha", alpha);
    for (int l = 0; l < d.layers; ++l)
        for (const LoraMatrix& m : matrices) {
            const std::string name = "blk." + std::to_string(l) + "." + m.name + ".weight.lora_";
            a.tensor(name + "a", {m.n_in, rank});
            a.tensor(name + "b", {rank, m.n_out});
        }
    return a.write(path);
}

inline int32_t set_adapters_lora(llama_context* ctx, std::vector<llama_adapter_lora*> adapters, std::vector<float> scales) {
    return kvweld::llama_compat::set_adapters(ctx, adapters.empty() ? nullptr : adapters.data(), adapters.size(),
                                              scales.empty() ? nullptr : scales.data());
}
#endif

#if KVWELD_USES(CVEC)
inline int32_t set_adapter_cvec(llama_context* ctx, const float* data, size_t len, int32_t n_embd, int32_t il_start,
                                int32_t il_end) {
    return kvweld::llama_compat::set_cvec(ctx, data, len, n_embd, il_start, il_end);
}
#endif

// ---- The engine as a server runs it, and its ground truth: two contexts of one model ----

inline int line = 0;  // the trace line being run
inline int32_t n_vocab = 0;

struct Side {
    llama_context* ctx = nullptr;
    std::vector<std::vector<float>> rows;  // per decode call: its output rows, back to back
    std::vector<int> row_lines;            // the trace line of each
    std::string refused;                   // the first call it refused, and where; it makes no call after it
#if KVWELD_USES(STATE)
    std::vector<std::vector<uint8_t>> states;
#endif
#if KVWELD_USES(SAMPLER)
    std::map<int, llama_sampler*> chains;   // backend sampler chains per sequence (llama_set_sampler)
    std::vector<std::vector<int>> sampled;  // per decode call: each output row's sampled token (-1: no chain)
#endif
#if KVWELD_USES(EMBD)
    bool embeddings = false;               // llama_set_embeddings as last set
    std::vector<std::vector<float>> embd;  // per decode call: each output row's embeddings (none when off)
#endif
#if KVWELD_USES(ABORT)
    int abort_after = -1, abort_asked = 0;  // the abort callback, armed for the next llama_decode (-1: not)
#endif
    llama_memory_t mem() const { return llama_get_memory(ctx); }
};

inline std::vector<Side*> live(std::vector<Side*> sides) {  // those that refused no call yet
    sides.erase(std::remove_if(sides.begin(), sides.end(), [](Side* s) { return !s->refused.empty(); }), sides.end());
    return sides;
}

inline void expect(Side& s, bool ok, const std::string& what) {
    if (!ok && s.refused.empty()) s.refused = what + " (trace line " + std::to_string(line) + ")";
}

// llama.cpp aborting the process (GGML_ASSERT, GGML_ABORT) is a finding
// shown: its message is above; this names where and exits 1.
inline void on_abort(int) {
    char text[96];
    const int n = std::snprintf(text, sizeof text, "FINDING SHOWN: llama.cpp aborted the process at trace line %d: exit 1\n", line);
    if (n > 0) (void)!write(2, text, size_t(n));
    _exit(1);
}

// The model written and loaded, llama.cpp's errors on stderr (nullptr: it did not load).
inline llama_model* start(const Dims& d) {
    std::signal(SIGABRT, on_abort);
    llama_backend_init();
    llama_log_set([](ggml_log_level level, const char* text, void*) { if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr); }, nullptr);
    char tmp[] = "/tmp/kvweld-repro-XXXXXX";
    dir = mkdtemp(tmp) ? tmp : ".";
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = write_model(dir + "/model.gguf", d) ? llama_model_load_from_file((dir + "/model.gguf").c_str(), mp) : nullptr;
    if (model) n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    return model;
}

inline void remove_files() {
    for (const std::string& f : files) std::remove(f.c_str());
    rmdir(dir.c_str());
}

inline llama_context* open_context(llama_model* model, uint32_t n_ctx, uint32_t seqs, bool unified, bool graph_reuse,
                                   float rope_scale, uint32_t n_ubatch, enum llama_pooling_type pooling) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx * seqs, cp.n_seq_max = seqs;  // each sequence n_ctx positions, as the engine was given
    cp.n_batch = 512, cp.n_ubatch = n_ubatch;     // a call in several ubatches where n_ubatch is below it
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.kv_unified = unified, cp.rope_freq_scale = rope_scale, cp.no_perf = false;
    cp.pooling_type = pooling;  // pooled: each row's embeddings are its sequence's (llama_get_embeddings_seq)
    kvweld::llama_compat::set_flash_attn(cp, false);
#if KVWELD_USES(SAMPLER)
    kvweld::llama_compat::sample_every_output(cp);  // backend sampling of every output row, as the engine was run
#endif
    setenv("LLAMA_GRAPH_REUSE_DISABLE", graph_reuse ? "0" : "1", 1);  // read when a context is made
    llama_context* ctx = llama_init_from_model(model, cp);
    unsetenv("LLAMA_GRAPH_REUSE_DISABLE");
    return ctx;
}

struct Tok {
    int seq, token, pos, out;
};

#if KVWELD_USES(EMBD)
inline void set_embeddings(Side& s, bool on) {
    llama_set_embeddings(s.ctx, on);
    s.embeddings = on;
}

// With embeddings on, output row i's: its own, or its sequence's pooled.
inline void read_embeddings(Side& s, const Tok& tok, size_t i) {
    const bool pooled = llama_pooling_type(s.ctx) != LLAMA_POOLING_TYPE_NONE;
    const float* e = pooled ? llama_get_embeddings_seq(s.ctx, tok.seq) : llama_get_embeddings_ith(s.ctx, int32_t(i));
    expect(s, e != nullptr, std::string(pooled ? "llama_get_embeddings_seq" : "llama_get_embeddings_ith") +
                                " returned NULL for batch index " + std::to_string(i));
    if (e) s.embd.back().insert(s.embd.back().end(), e, e + llama_model_n_embd(llama_get_model(s.ctx)));
}
#endif

#if KVWELD_USES(SAMPLER)
// A row of a sequence with a sampler chain: its sampled token (llama.cpp
// need not copy the row's logits back; zeros stand in for them). False: no chain.
inline bool read_sampled(Side& s, const Tok& tok, size_t i) {
    const auto chain = s.chains.find(tok.seq);
    s.sampled.back().push_back(-1);
    if (chain == s.chains.end()) return false;
    s.rows.back().insert(s.rows.back().end(), size_t(n_vocab), 0.0f);
    const llama_token token = llama_get_sampled_token_ith(s.ctx, int32_t(i));
    expect(s, token >= 0, "llama_get_sampled_token_ith: no token for batch index " + std::to_string(i) +
                              " of sequence " + std::to_string(tok.seq) + ", which has a sampler chain");
    if (token >= 0) llama_sampler_accept(chain->second, token);
    s.sampled.back().back() = token;
    return true;
}
#endif

inline void decode(Side& s, const std::vector<Tok>& toks) {
    llama_batch b = llama_batch_init(int32_t(toks.size()), 0, 1);
    for (size_t i = 0; i < toks.size(); ++i) {
        b.token[i] = toks[i].token, b.pos[i] = toks[i].pos, b.logits[i] = int8_t(toks[i].out);
        b.n_seq_id[i] = 1, b.seq_id[i][0] = toks[i].seq;
    }
    b.n_tokens = int32_t(toks.size());
    bool stopped = false;  // by the abort callback: llama_decode returns 2, and no rows
#if KVWELD_USES(ABORT)
    const bool armed = s.abort_after >= 0;
    s.abort_asked = 0;
#endif
    const int32_t rc = llama_decode(s.ctx, b);
#if KVWELD_USES(ABORT)
    stopped = armed && rc == 2;  // no entry either: a ground truth that skips the call stays aligned
    s.abort_after = -1;
#endif
    expect(s, rc == 0 || stopped, "llama_decode returned " + std::to_string(rc));
    if (rc == 0) {
        s.rows.emplace_back();
        s.row_lines.push_back(line);
#if KVWELD_USES(SAMPLER)
        s.sampled.emplace_back();
#endif
#if KVWELD_USES(EMBD)
        s.embd.emplace_back();
#endif
        for (size_t i = 0; i < toks.size(); ++i) {
            if (!toks[i].out) continue;
#if KVWELD_USES(EMBD)
            if (s.embeddings) read_embeddings(s, toks[i], i);
#endif
#if KVWELD_USES(SAMPLER)
            if (read_sampled(s, toks[i], i)) continue;
#endif
            const float* row = llama_get_logits_ith(s.ctx, int32_t(i));
            s.rows.back().insert(s.rows.back().end(), row, row + n_vocab);
        }
    }
    llama_batch_free(b);
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
        expect(s, held == n, "after the aborted llama_decode, sequence " + std::to_string(seq) + " holds " +
                                 std::to_string(held) + " positions where kvweld's run kept " + std::to_string(n));
    }
}
#endif

#if KVWELD_USES(SAMPLER)
// Backend sampler chains: greedy, or top_k then dist; set anew
// (llama_set_sampler), changed in place (the same object emptied and
// refilled, not given again: a context takes a chain once), or cleared.
inline llama_sampler* fill_chain(llama_sampler* chain, int top_k, uint32_t seed) {
    llama_sampler_chain_add(chain, top_k == 0 ? llama_sampler_init_greedy() : llama_sampler_init_top_k(top_k));
    if (top_k != 0) llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));
    return chain;
}
inline void set_chain(Side& s, int seq, int top_k, uint32_t seed) {
    llama_sampler* chain = fill_chain(llama_sampler_chain_init(llama_sampler_chain_default_params()), top_k, seed);
    expect(s, llama_set_sampler(s.ctx, seq, chain), "llama_set_sampler");
    if (s.chains.count(seq)) llama_sampler_free(s.chains[seq]);  // the context holds the new one now
    s.chains[seq] = chain;
}
inline void change_chain(Side& s, int seq, int top_k, uint32_t seed) {
    llama_sampler* chain = s.chains.at(seq);
    while (llama_sampler_chain_n(chain) > 0) llama_sampler_free(llama_sampler_chain_remove(chain, 0));
    fill_chain(chain, top_k, seed);
}
inline void clear_chain(Side& s, int seq) {
    if (!s.chains.count(seq)) return;
    llama_set_sampler(s.ctx, seq, nullptr);
    llama_sampler_free(s.chains[seq]);
    s.chains.erase(seq);
}
inline void free_chains(Side& s) {  // after its context
    for (auto& [seq, chain] : s.chains) llama_sampler_free(chain);
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
           "llama_state_seq_set_data read " + std::to_string(read) + " of " + std::to_string(state.size()) +
               " bytes and the sequence holds positions " + std::to_string(lo) + ".." + std::to_string(hi) +
               ", for a state of " + std::to_string(positions));
}
#endif

// The largest |a - b| over two sides' rows (per decode call, back to back),
// and where (call k, index i); -1: none compared.
template <class T>
double max_diff(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b, size_t& k, size_t& i) {
    double worst = -1;
    for (size_t c = 0; c < a.size() && c < b.size(); ++c)
        for (size_t j = 0; j < a[c].size() && j < b[c].size(); ++j)
            if (const double d = std::fabs(double(a[c][j]) - double(b[c][j])); d > worst || d != d) worst = d, k = c, i = j;
    return worst;
}

inline int report(Side& engine, Side& truth, bool count_reuse, double tolerance) {
    size_t k = 0, i = 0;
    const size_t compared = engine.rows.size() < truth.rows.size() ? engine.rows.size() : truth.rows.size();
    std::printf("decode calls compared: %zu (the engine made %zu, the ground truth %zu)\n", compared, engine.rows.size(),
                truth.rows.size());
    const double worst = max_diff(engine.rows, truth.rows, k, i);
    if (worst != -1)
        std::printf("max |logit - expected| = %.6g (tolerance %g): decode call %zu (trace line %d), row %zu, token %zu: "
                    "engine %.6f, expected %.6f\n", worst, tolerance, k + 1, engine.row_lines[k], i / size_t(n_vocab),
                    i % size_t(n_vocab), engine.rows[k][i], truth.rows[k][i]);
    bool shown = worst != -1 && !(worst <= tolerance);
#if KVWELD_USES(EMBD)
    const double embd = max_diff(engine.embd, truth.embd, k, i);
    if (embd != -1)
        std::printf("max |embedding - expected| = %.6g (tolerance %g): decode call %zu (trace line %d)\n", embd, tolerance,
                    k + 1, engine.row_lines[k]);
    shown = shown || (embd != -1 && !(embd <= tolerance));
#endif
#if KVWELD_USES(SAMPLER)
    bool differ = false;  // sampled tokens (-1: the row's sequence had no chain)
    for (size_t c = 0; c < engine.sampled.size() && c < truth.sampled.size(); ++c)
        for (size_t j = 0; j < engine.sampled[c].size() && j < truth.sampled[c].size(); ++j)
            if (engine.sampled[c][j] != truth.sampled[c][j] && !differ) {
                differ = true;
                std::printf("sampled tokens differ first in decode call %zu (trace line %d), row %zu: engine %d, expected %d\n",
                            c + 1, engine.row_lines[c], j, engine.sampled[c][j], truth.sampled[c][j]);
            }
    shown = shown || differ;
#endif
    const int reused = llama_perf_context(engine.ctx).n_reused, expected = llama_perf_context(truth.ctx).n_reused;
    std::printf("graphs reused: engine %d, ground truth %d%s\n", reused, expected,
                count_reuse ? " (the engine must reuse as often)" : " (not compared)");
    shown = shown || (count_reuse && reused < expected);
    if (!truth.refused.empty() && engine.refused.empty())
        return std::printf("INCONCLUSIVE: the ground truth refused %s, the engine did not\n", truth.refused.c_str()), 2;
    if (!engine.refused.empty())
        std::printf("the engine refused %s; the ground truth %s\n", engine.refused.c_str(),
                    truth.refused.empty() ? "accepted every call" : ("refused " + truth.refused).c_str());
    shown = shown || (!engine.refused.empty() && truth.refused.empty());
    std::printf("%s\n", shown ? "FINDING SHOWN: exit 1" : "not shown: exit 0");
    return shown ? 1 : 0;
}
