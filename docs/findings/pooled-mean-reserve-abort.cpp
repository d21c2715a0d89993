// A standalone reproducer of llama.cpp finding 'pooled-mean-reserve-abort', written by kvweld from its
// trace (kvweld repro targets/llamacpp/known_findings/pooled_mean_reserve_abort.jsonl). It uses llama.h and libllama alone:
//   c++ -std=c++20 repro.cpp -I<llama.cpp>/include -L<llama.cpp>/lib -lllama -lggml -lggml-base -o repro
// The engine: one llama.cpp context, as a server drives it (graph_reuse=1,kv_unified=0,pooling=mean; kvweld ran the trace without pooling=mean, which its plugin refuses).
// The ground truth: a second context of the same model (graph_reuse=1,kv_unified=0,pooling=mean),
// given the same calls. Exit 1: the finding shows (the numbers are printed); 0: it does not.

// ---- kvweld's llama_compat.hpp: what llama.h renamed between releases ----
// What the installed llama.h has, detected at build time, so the plugin
// compiles against every llama-cpp-python release from 0.3.15 (the first
// whose llama.cpp reuses graphs) to the newest with no per-release code.
// The differences met there, each with the release that changed it:
//
// - LoRA adapters: llama_set_adapter_lora (one adapter and scale per call)
//   with llama_clear_adapter_lora, up to 0.3.16; llama_set_adapters_lora
//   (the whole set, which compares before it changes anything) from 0.3.20.
// - Control vector: llama_apply_adapter_cvec up to 0.3.16,
//   llama_set_adapter_cvec (the same arguments) from 0.3.20.
// - Flash attention: a bool `flash_attn` up to 0.3.16, an enum
//   `flash_attn_type` from 0.3.20.
// - Backend samplers per sequence (llama_set_sampler,
//   llama_get_sampled_token_ith): not in 0.3.16; from 0.3.20, but up to
//   0.3.32 with one sampled row per sequence in a call (llama_context::decode
//   refuses a second: src/llama-context.cpp:1723 in 0.3.32), which a call
//   with drafts needs; llama_context_params::n_outputs_max_per_seq lifts
//   it in 0.3.36. The plugin declares samplers only where that field is.
//
// A function is detected by overload resolution: fallbacks with the same
// name, declared here as templates returning Missing, lose to a real
// declaration (a non-template exact match) and win only where llama.h has
// none. A field is detected with a requires-expression. Where neither form
// of a feature exists, kHas* is false and the plugin does not declare the
// capability.

#include <llama.h>

#include <cstddef>
#include <type_traits>

// At global scope, so that a using-directive puts them beside llama.h's own.
namespace kvweld_llama_fallback {
struct Missing {};
template <class... A> Missing llama_set_adapters_lora(A...);
template <class... A> Missing llama_set_adapter_lora(A...);
template <class... A> Missing llama_clear_adapter_lora(A...);
template <class... A> Missing llama_set_adapter_cvec(A...);
template <class... A> Missing llama_apply_adapter_cvec(A...);
template <class... A> Missing llama_set_sampler(A...);
template <class... A> Missing llama_get_sampled_token_ith(A...);
}  // namespace kvweld_llama_fallback

namespace kvweld::llama_compat {

namespace probe {
using namespace ::kvweld_llama_fallback;
template <class C> using set_adapters = decltype(llama_set_adapters_lora(
    (C*)nullptr, (llama_adapter_lora**)nullptr, std::size_t{}, (float*)nullptr));
template <class C> using set_adapter = decltype(llama_set_adapter_lora((C*)nullptr, (llama_adapter_lora*)nullptr, 0.0f));
template <class C> using set_cvec = decltype(llama_set_adapter_cvec((C*)nullptr, (const float*)nullptr, std::size_t{},
                                                                    int32_t{}, int32_t{}, int32_t{}));
template <class C> using apply_cvec = decltype(llama_apply_adapter_cvec((C*)nullptr, (const float*)nullptr,
                                                                        std::size_t{}, int32_t{}, int32_t{}, int32_t{}));
template <class C> using set_sampler = decltype(llama_set_sampler((C*)nullptr, llama_seq_id{}, (llama_sampler*)nullptr));
template <class C> using sampled_token = decltype(llama_get_sampled_token_ith((C*)nullptr, int32_t{}));
template <class T> inline constexpr bool found = !std::is_same_v<T, ::kvweld_llama_fallback::Missing>;
}  // namespace probe

inline constexpr bool kHasSetAdapters = probe::found<probe::set_adapters<llama_context>>;
inline constexpr bool kHasLora = kHasSetAdapters || probe::found<probe::set_adapter<llama_context>>;
inline constexpr bool kHasSetCvec = probe::found<probe::set_cvec<llama_context>>;
inline constexpr bool kHasCvec = kHasSetCvec || probe::found<probe::apply_cvec<llama_context>>;
template <class P> concept outputs_per_seq = requires(P p) { p.n_outputs_max_per_seq; };
inline constexpr bool kHasBackendSampling = probe::found<probe::set_sampler<llama_context>> &&
                                            probe::found<probe::sampled_token<llama_context>> &&
                                            outputs_per_seq<llama_context_params>;

// A sequence's backend sampler chain (nullptr: none); llama.cpp's answer
// (false: it cannot offload the chain). False where llama.h has no such call.
template <class C = llama_context>
bool set_sampler(C* ctx, llama_seq_id seq, llama_sampler* chain) {
    using namespace ::kvweld_llama_fallback;
    if constexpr (probe::found<probe::set_sampler<C>>)
        return llama_set_sampler(ctx, seq, chain);
    else
        return false;
}

// The token the backend sampled for batch index i (LLAMA_TOKEN_NULL: none).
template <class C = llama_context>
llama_token sampled_token(C* ctx, int32_t i) {
    using namespace ::kvweld_llama_fallback;
    if constexpr (probe::found<probe::sampled_token<C>>)
        return llama_get_sampled_token_ith(ctx, i);
    else
        return -1;
}

// The adapters every later decode runs with (n may be 0: none). Returns
// llama.cpp's status (0: applied).
template <class C = llama_context>
int32_t set_adapters(C* ctx, llama_adapter_lora** adapters, std::size_t n, float* scales) {
    using namespace ::kvweld_llama_fallback;
    if constexpr (probe::found<probe::set_adapters<C>>) {
        return llama_set_adapters_lora(ctx, adapters, n, scales);
    } else if constexpr (probe::found<probe::set_adapter<C>>) {
        llama_clear_adapter_lora(ctx);
        for (std::size_t i = 0; i < n; ++i)
            if (const int32_t rc = llama_set_adapter_lora(ctx, adapters[i], scales[i]); rc != 0) return rc;
        return 0;
    } else {
        return -1;  // kHasLora is false: the capability is not declared
    }
}

// The control vector (data NULL: none), llama.cpp's layout from layer 1.
template <class C = llama_context>
int32_t set_cvec(C* ctx, const float* data, std::size_t len, int32_t n_embd, int32_t il_start, int32_t il_end) {
    using namespace ::kvweld_llama_fallback;
    if constexpr (probe::found<probe::set_cvec<C>>)
        return llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
    else if constexpr (probe::found<probe::apply_cvec<C>>)
        return llama_apply_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
    else
        return -1;  // kHasCvec is false: the capability is not declared
}

// Flash attention on or off, whichever field this llama.h has.
template <class P>
void set_flash_attn(P& params, bool on) {
    if constexpr (requires { params.flash_attn_type; })
        params.flash_attn_type = decltype(params.flash_attn_type)(on ? 1 : 0);  // ENABLED = 1, DISABLED = 0
    else
        params.flash_attn = on;
}

// Backend sampling's outputs per sequence and decode: every output row
// (0: n_outputs_max; llama.cpp's default is 1, which refuses a call with
// two sampled rows of one sequence: a prefill asking for every row, or
// drafts). Nothing where the release has no backend sampling.
template <class P>
void sample_every_output(P& params) {
    if constexpr (requires { params.n_outputs_max_per_seq; }) params.n_outputs_max_per_seq = 0;
}

}  // namespace kvweld::llama_compat

#include <llama.h>

#include <cmath>
#include <csignal>
#include <map>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

// llama_set_warmup is deprecated in llama.h, and still the only way to switch warmup.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

// ---- A seeded random model of the llama architecture, written as GGUF (F32 tensors, no vocabulary) ----

struct Dims {
    int dim, layers, heads, kv_heads, head_dim, ffn, vocab, ctx_train, experts, experts_used;
    float rope_theta, norm_eps;
};

inline std::vector<float> random_floats(uint64_t seed, uint64_t n, float scale) {  // splitmix64, uniform in [-scale, scale)
    std::vector<float> out(n);
    for (float& x : out) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        x = (float((z ^ (z >> 31)) >> 40) / float(1 << 23) - 1.0f) * scale;
    }
    return out;
}

struct Gguf {
    struct Tensor {
        std::string name;
        std::vector<uint64_t> ne;
        std::vector<float> data;
    };
    std::vector<char> kv;
    uint64_t n_kv = 0;
    std::vector<Tensor> tensors;
    uint64_t seed = 1;

    template <class T> static void put(std::vector<char>& b, T v) { b.insert(b.end(), (const char*)&v, (const char*)&v + sizeof v); }
    static void put(std::vector<char>& b, const std::string& s) { put<uint64_t>(b, s.size()); b.insert(b.end(), s.begin(), s.end()); }
    void key(const std::string& k, uint32_t type) { put(kv, k); put(kv, type); ++n_kv; }
    void u32(const std::string& k, uint32_t v) { key(k, 4); put(kv, v); }
    void f32(const std::string& k, float v) { key(k, 6); put(kv, v); }
    void str(const std::string& k, const std::string& v) { key(k, 8); put(kv, v); }
    // Random, scaled by gain/sqrt(ne[0]) (the input width); gain 0: all ones (a norm's weights).
    void tensor(const std::string& name, std::vector<uint64_t> ne, float gain = 1.0f) {
        uint64_t n = 1;
        for (uint64_t d : ne) n *= d;
        tensors.push_back({name, ne, gain == 0 ? std::vector<float>(n, 1.0f) : random_floats(seed++ * 7919, n, gain / std::sqrt(float(ne[0])))});
    }
    bool write(const std::string& path) const {
        auto pad = [](uint64_t n) { return (n + 31) / 32 * 32; };  // GGUF's default alignment
        std::vector<char> b;
        put<uint32_t>(b, 0x46554747);  // "GGUF"
        put<uint32_t>(b, 3);
        put<uint64_t>(b, tensors.size());
        put<uint64_t>(b, n_kv);
        b.insert(b.end(), kv.begin(), kv.end());
        uint64_t offset = 0;
        for (const Tensor& t : tensors) {
            put(b, t.name);
            put<uint32_t>(b, uint32_t(t.ne.size()));
            for (uint64_t d : t.ne) put(b, d);
            put<uint32_t>(b, 0);  // GGML_TYPE_F32
            put(b, offset);
            offset += pad(t.data.size() * 4);
        }
        b.resize(pad(b.size()));
        for (const Tensor& t : tensors) {
            b.insert(b.end(), (const char*)t.data.data(), (const char*)(t.data.data() + t.data.size()));
            b.resize(pad(b.size()));
        }
        FILE* f = std::fopen(path.c_str(), "wb");
        bool ok = f && std::fwrite(b.data(), 1, b.size(), f) == b.size();
        return f && std::fclose(f) == 0 && ok;
    }
};

inline bool write_model(const std::string& path, const Dims& d) {
    Gguf g;
    g.str("general.architecture", "llama");
    g.u32("llama.vocab_size", d.vocab);
    g.u32("llama.context_length", d.ctx_train);
    g.u32("llama.embedding_length", d.dim);
    g.u32("llama.block_count", d.layers);
    g.u32("llama.feed_forward_length", d.ffn);
    g.u32("llama.attention.head_count", d.heads);
    g.u32("llama.attention.head_count_kv", d.kv_heads);
    g.u32("llama.rope.dimension_count", d.head_dim);
    g.f32("llama.attention.layer_norm_rms_epsilon", d.norm_eps);
    g.f32("llama.rope.freq_base", d.rope_theta);
    g.str("tokenizer.ggml.model", "none");
    if (d.experts > 0) {
        g.u32("llama.expert_count", d.experts);
        g.u32("llama.expert_used_count", d.experts_used);
    }
    const uint64_t D = d.dim, Q = uint64_t(d.heads) * d.head_dim, K = uint64_t(d.kv_heads) * d.head_dim, F = d.ffn,
                   V = d.vocab, E = d.experts;
    g.tensor("token_embd.weight", {D, V});
    for (int l = 0; l < d.layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        g.tensor(b + "attn_norm.weight", {D}, 0);
        g.tensor(b + "attn_q.weight", {D, Q}, 4.0f);  // sharp attention: a wrong position shows in the rows
        g.tensor(b + "attn_k.weight", {D, K}, 4.0f);
        g.tensor(b + "attn_v.weight", {D, K});
        g.tensor(b + "attn_output.weight", {Q, D});
        g.tensor(b + "ffn_norm.weight", {D}, 0);
        if (E > 0) {
            g.tensor(b + "ffn_gate_inp.weight", {D, E});
            g.tensor(b + "ffn_gate_exps.weight", {D, F, E});
            g.tensor(b + "ffn_up_exps.weight", {D, F, E});
            g.tensor(b + "ffn_down_exps.weight", {F, D, E});
        } else {
            g.tensor(b + "ffn_gate.weight", {D, F});
            g.tensor(b + "ffn_up.weight", {D, F});
            g.tensor(b + "ffn_down.weight", {F, D});
        }
    }
    g.tensor("output_norm.weight", {D}, 0);
    g.tensor("output.weight", {D, V});
    return g.write(path);
}

// A LoRA adapter of `rank` on each named matrix of every layer ({name, n_out, n_in}).
struct LoraMatrix {
    const char* name;
    uint64_t n_out, n_in;
};
inline bool write_lora(const std::string& path, const Dims& d, uint64_t seed, int rank, float alpha,
                       const std::vector<LoraMatrix>& matrices) {
    Gguf g;
    g.seed = seed;
    g.str("general.architecture", "llama");
    g.str("general.type", "adapter");
    g.str("adapter.type", "lora");
    g.f32("adapter.lora.alpha", alpha);
    for (int l = 0; l < d.layers; ++l)
        for (const LoraMatrix& m : matrices) {
            const std::string name = "blk." + std::to_string(l) + "." + m.name + ".weight.lora_";
            g.tensor(name + "a", {m.n_in, uint64_t(rank)});
            g.tensor(name + "b", {uint64_t(rank), m.n_out});
        }
    return g.write(path);
}

// ---- What llama.h renamed between releases: kvweld's llama_compat.hpp, above ----

inline int32_t set_adapters_lora(llama_context* ctx, std::vector<llama_adapter_lora*> adapters, std::vector<float> scales) {
    return kvweld::llama_compat::set_adapters(ctx, adapters.empty() ? nullptr : adapters.data(), adapters.size(),
                                              scales.empty() ? nullptr : scales.data());
}

inline int32_t set_adapter_cvec(llama_context* ctx, const float* data, size_t len, int32_t n_embd, int32_t il_start,
                                int32_t il_end) {
    return kvweld::llama_compat::set_cvec(ctx, data, len, n_embd, il_start, il_end);
}

// ---- The engine as a server runs it, and its ground truth: two contexts of one model ----

inline int line = 0;      // the trace line being run
static int32_t n_vocab = 0;

struct Side {
    const char* name;
    llama_context* ctx = nullptr;
    std::vector<std::vector<float>> rows;  // per decode call: its output rows, back to back
    std::vector<int> row_lines;            // the trace line of each
    std::vector<std::vector<uint8_t>> states;
    std::map<int, llama_sampler*> chains;     // backend sampler chains per sequence (llama_set_sampler)
    std::vector<std::vector<int>> sampled;    // per decode call: each output row's sampled token (-1: no chain)
    bool embeddings = false;                  // llama_set_embeddings as last set
    std::vector<std::vector<float>> embd;     // per decode call: each output row's embeddings (none when off)
    int abort_after = -1, abort_asked = 0;   // the abort callback, armed for the next llama_decode (-1: not)
    std::string refused;  // the first call it refused, and where; it makes no call after it
    llama_memory_t mem() const { return llama_get_memory(ctx); }
};

inline std::vector<Side*> live(std::vector<Side*> sides) {
    std::vector<Side*> out;
    for (Side* s : sides)
        if (s->refused.empty()) out.push_back(s);
    return out;
}

inline void expect(Side& s, bool ok, const std::string& what) {
    if (!ok && s.refused.empty()) s.refused = what + " (trace line " + std::to_string(line) + ")";
}

inline llama_context* open_context(llama_model* model, uint32_t n_ctx, uint32_t seqs, bool unified, bool graph_reuse,
                                   float rope_scale, uint32_t n_ubatch, enum llama_pooling_type pooling) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx * seqs;  // each sequence n_ctx positions, as the engine was given
    cp.n_seq_max = seqs;
    cp.n_batch = 512;
    cp.n_ubatch = n_ubatch;  // a call in several ubatches where it is below the call
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.kv_unified = unified;
    cp.pooling_type = pooling;  // pooled: each row's embeddings are its sequence's (llama_get_embeddings_seq)
    cp.rope_freq_scale = rope_scale;
    cp.no_perf = false;
    kvweld::llama_compat::set_flash_attn(cp, false);
    kvweld::llama_compat::sample_every_output(cp);  // backend sampling of every output row, as the engine was run
    setenv("LLAMA_GRAPH_REUSE_DISABLE", graph_reuse ? "0" : "1", 1);  // read when a context is made
    llama_context* ctx = llama_init_from_model(model, cp);
    unsetenv("LLAMA_GRAPH_REUSE_DISABLE");
    return ctx;
}

struct Tok {
    int seq, token, pos, out;
};

// llama.cpp aborting the process (GGML_ASSERT, GGML_ABORT) is a finding
// shown: its message is above; this names where and exits 1.
inline void on_abort(int) {
    char text[96];
    const int n = std::snprintf(text, sizeof text, "FINDING SHOWN: llama.cpp aborted the process at trace line %d: exit 1\n", line);
    if (n > 0) (void)!write(2, text, size_t(n));
    _exit(1);
}

inline void set_embeddings(Side& s, bool on) {
    llama_set_embeddings(s.ctx, on);
    s.embeddings = on;
}

// With embeddings on, output row i's: its own, or its sequence's pooled.
inline void read_embeddings(Side& s, const Tok& tok, size_t i) {
    const bool pooled = llama_pooling_type(s.ctx) != LLAMA_POOLING_TYPE_NONE;
    const float* e = pooled ? llama_get_embeddings_seq(s.ctx, tok.seq) : llama_get_embeddings_ith(s.ctx, int32_t(i));
    const size_t n = size_t(llama_model_n_embd(llama_get_model(s.ctx)));
    expect(s, e != nullptr, std::string(pooled ? "llama_get_embeddings_seq" : "llama_get_embeddings_ith") +
                                " returned NULL for batch index " + std::to_string(i));
    if (e) s.embd.back().insert(s.embd.back().end(), e, e + n);
}

inline void decode(Side& s, const std::vector<Tok>& toks) {
    llama_batch b = llama_batch_init(int32_t(toks.size()), 0, 1);
    for (size_t i = 0; i < toks.size(); ++i) {
        b.token[i] = toks[i].token;
        b.pos[i] = toks[i].pos;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = toks[i].seq;
        b.logits[i] = int8_t(toks[i].out);
    }
    b.n_tokens = int32_t(toks.size());
    const bool armed = s.abort_after >= 0;
    s.abort_asked = 0;
    const int32_t rc = llama_decode(s.ctx, b);
    s.abort_after = -1;
    // A call the callback stopped returns no rows (and adds no entry: a
    // ground truth that skips it stays aligned).
    expect(s, rc == 0 || (armed && rc == 2), "llama_decode returned " + std::to_string(rc));
    if (rc == 0) {
        s.rows.emplace_back();
        s.sampled.emplace_back();
        s.embd.emplace_back();
        s.row_lines.push_back(line);
        for (size_t i = 0; i < toks.size(); ++i)
            if (toks[i].out) {
                if (s.embeddings) read_embeddings(s, toks[i], i);
                const auto chain = s.chains.find(toks[i].seq);
                if (chain == s.chains.end()) {
                    const float* row = llama_get_logits_ith(s.ctx, int32_t(i));
                    s.rows.back().insert(s.rows.back().end(), row, row + n_vocab);
                    s.sampled.back().push_back(-1);
                    continue;
                }
                // A sampled row: judged by its token (llama.cpp need not copy its logits back).
                s.rows.back().insert(s.rows.back().end(), size_t(n_vocab), 0.0f);
                const llama_token token = kvweld::llama_compat::sampled_token(s.ctx, int32_t(i));
                expect(s, token >= 0, "llama_get_sampled_token_ith: no token for batch index " + std::to_string(i) +
                                          " of sequence " + std::to_string(toks[i].seq) + ", which has a sampler chain");
                if (token >= 0) llama_sampler_accept(chain->second, token);
                s.sampled.back().push_back(token);
            }
    }
    llama_batch_free(b);
}

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

// Backend sampler chains: greedy, or top_k then dist; set anew
// (llama_set_sampler), changed in place (the same object emptied and
// refilled, not given again: a context takes a chain once), or cleared.
inline llama_sampler* fill_chain(llama_sampler* chain, int top_k, uint32_t seed) {
    if (top_k == 0) {
        llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    } else {
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(top_k));
        llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));
    }
    return chain;
}
inline void set_chain(Side& s, int seq, int top_k, uint32_t seed) {
    llama_sampler* chain = fill_chain(llama_sampler_chain_init(llama_sampler_chain_default_params()), top_k, seed);
    expect(s, kvweld::llama_compat::set_sampler(s.ctx, seq, chain), "llama_set_sampler");
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
    kvweld::llama_compat::set_sampler(s.ctx, seq, nullptr);
    llama_sampler_free(s.chains[seq]);
    s.chains.erase(seq);
}
inline void free_chains(Side& s) {  // after its context
    for (auto& [seq, chain] : s.chains) llama_sampler_free(chain);
    s.chains.clear();
}

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

inline int report(Side& engine, Side& truth, bool count_reuse, double tolerance) {
    double worst = -1;  // none compared yet
    size_t worst_call = 0, worst_at = 0, calls = 0;
    for (size_t k = 0; k < engine.rows.size() && k < truth.rows.size(); ++k, ++calls)
        for (size_t i = 0; i < engine.rows[k].size() && i < truth.rows[k].size(); ++i) {
            const double d = std::fabs(double(engine.rows[k][i]) - double(truth.rows[k][i]));
            if (d > worst || d != d) worst = d, worst_call = k, worst_at = i;
        }
    std::printf("decode calls compared: %zu (the engine made %zu, the ground truth %zu)\n", calls, engine.rows.size(),
                truth.rows.size());
    bool shown = false;
    if (worst != -1) {
        const float got = engine.rows[worst_call][worst_at], want = truth.rows[worst_call][worst_at];
        std::printf("max |logit - expected| = %.6g (tolerance %g): decode call %zu (trace line %d), row %zu, token %zu: "
                    "engine %.6f, expected %.6f\n", worst, tolerance, worst_call + 1, engine.row_lines[worst_call],
                    worst_at / size_t(n_vocab), worst_at % size_t(n_vocab), got, want);
        shown = shown || !(worst <= tolerance);
    }
    double worst_embd = -1;
    size_t embd_call = 0;
    for (size_t k = 0; k < engine.embd.size() && k < truth.embd.size(); ++k)
        for (size_t i = 0; i < engine.embd[k].size() && i < truth.embd[k].size(); ++i) {
            const double d = std::fabs(double(engine.embd[k][i]) - double(truth.embd[k][i]));
            if (d > worst_embd || d != d) worst_embd = d, embd_call = k;
        }
    if (worst_embd != -1) {
        std::printf("max |embedding - expected| = %.6g (tolerance %g): decode call %zu (trace line %d)\n", worst_embd,
                    tolerance, embd_call + 1, engine.row_lines[embd_call]);
        shown = shown || !(worst_embd <= tolerance);
    }
    size_t sampled = 0, differ = 0;
    for (size_t k = 0; k < engine.sampled.size() && k < truth.sampled.size(); ++k)
        for (size_t i = 0; i < engine.sampled[k].size() && i < truth.sampled[k].size(); ++i) {
            if (engine.sampled[k][i] < 0 && truth.sampled[k][i] < 0) continue;
            ++sampled;
            if (engine.sampled[k][i] == truth.sampled[k][i]) continue;
            if (differ++ == 0)
                std::printf("sampled tokens differ first in decode call %zu (trace line %d), row %zu: engine %d, "
                            "expected %d\n", k + 1, engine.row_lines[k], i, engine.sampled[k][i], truth.sampled[k][i]);
        }
    if (sampled > 0) std::printf("sampled tokens compared: %zu, %zu of them differ\n", sampled, differ);
    shown = shown || differ > 0;
    const int reused = llama_perf_context(engine.ctx).n_reused, expected = llama_perf_context(truth.ctx).n_reused;
    std::printf("graphs reused: engine %d, ground truth %d%s\n", reused, expected,
                count_reuse ? " (the engine must reuse as often)" : " (not compared)");
    shown = shown || (count_reuse && reused < expected);
    if (!truth.refused.empty() && engine.refused.empty()) {
        std::printf("INCONCLUSIVE: the ground truth refused %s, the engine did not\n", truth.refused.c_str());
        return 2;
    }
    if (!engine.refused.empty())
        std::printf("the engine refused %s; the ground truth %s\n", engine.refused.c_str(),
                    truth.refused.empty() ? "accepted every call" : ("refused " + truth.refused).c_str());
    shown = shown || (!engine.refused.empty() && truth.refused.empty());
    std::printf("%s\n", shown ? "FINDING SHOWN: exit 1" : "not shown: exit 0");
    return shown ? 1 : 0;
}

int main() {
    std::signal(SIGABRT, on_abort);
    llama_backend_init();
    llama_log_set([](ggml_log_level level, const char* text, void*) {
        if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
    }, nullptr);
    const Dims dims{32, 2, 4, 2, 8, 64, 64, 256, 0, 0, 10000.0f, 9.99999975e-06f};
    char tmp[] = "/tmp/kvweld-repro-XXXXXX";
    const std::string dir = mkdtemp(tmp) ? tmp : ".";
    if (!write_model(dir + "/model.gguf", dims)) return 2;
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file((dir + "/model.gguf").c_str(), mp);
    if (!model) return 2;
    n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<llama_adapter_lora*> lora;  // the trace's LoRA adapters, each generated here
    if (!write_lora(dir + "/lora0.gguf", dims, 1000, 1, 1.0f, {{"attn_q", 32, 32}, {"attn_v", 16, 32}, {"ffn_down", 32, 64}})) return 2;
    lora.push_back(llama_adapter_lora_init(model, (dir + "/lora0.gguf").c_str()));
    Side engine{"engine"}, truth{"ground truth"};
    engine.ctx = open_context(model, 189, 3, false, true, 1.0f, 512, LLAMA_POOLING_TYPE_MEAN);
    truth.ctx = open_context(model, 189, 3, false, true, 1.0f, 512, LLAMA_POOLING_TYPE_MEAN);
    if (!engine.ctx || !truth.ctx) return 2;
    const std::vector<Side*> both{&engine, &truth}, engine_only{&engine}, truth_only{&truth};
    for (Side* s : both) llama_set_abort_callback(s->ctx, abort_check, s);

    line = 2;  // {"capacity":0,"max_new":0,"op":"admit","pick":0,"prompt":[5,59],"recycle":false}
    for (Side* s : live(both)) llama_memory_seq_rm(s->mem(), 0, -1, -1);

    line = 3;  // {"adapters":[0],"op":"lora","scales":[1.0]}
    for (Side* s : live(both)) expect(*s, set_adapters_lora(s->ctx, {lora[0]}, {1.0f}) == 0, "the LoRA adapters");

    line = 4;  // {"key":"embeddings","op":"live","value":"1"}
    for (Side* s : live(both)) set_embeddings(*s, true);

    line = 5;  // {"op":"step","seed":0,"wants":[1]}
    for (Side* s : live(both)) decode(*s, {{0, 5, 0, 1}});

    const int verdict = report(engine, truth, false, 1e-3);
    llama_free(engine.ctx);
    llama_free(truth.ctx);
    free_chains(engine);
    free_chains(truth);
    for (llama_adapter_lora* a : lora) llama_adapter_lora_free(a);
    llama_model_free(model);
    std::remove((dir + "/model.gguf").c_str());
    std::remove((dir + "/lora0.gguf").c_str());
    rmdir(dir.c_str());
    return verdict;
}
