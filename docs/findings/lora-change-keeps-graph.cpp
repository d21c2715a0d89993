// A standalone reproducer of llama.cpp finding 'lora-change-keeps-graph', written by kvweld from its trace (kvweld repro targets/llamacpp/findings/0.3.16/lora_change_keeps_graph.jsonl).
// It uses llama.h and libllama alone: c++ -std=c++20 repro.cpp -I<llama.cpp>/include -L<llama.cpp>/lib -lllama -lggml -lggml-base -o repro
// The engine: one llama.cpp context, as a server drives it (graph_reuse=1,kv_unified=0). The ground truth: a second context of the same model (graph_reuse=0,kv_unified=0), given the same calls.
// Exit 1: the finding shows (the numbers are printed); 0: it does not.

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <gguf.h>
#include <llama.h>
#include <string>
#include <unistd.h>
#include <vector>

// ---- kvweld's llama_compat.hpp (what llama.h renamed between releases) and llamacpp_repro_prelude.hpp, stripped to this program ----
namespace kvweld::llama_compat {
template <class C = llama_context>
int32_t set_adapters(C* ctx, std::vector<llama_adapter_lora*> adapters, std::vector<float> scales) {
    if constexpr (requires { llama_set_adapters_lora(ctx, adapters.data(), adapters.size(), scales.data()); }) {
        return llama_set_adapters_lora(ctx, adapters.data(), adapters.size(), scales.data());
    } else {
        int32_t rc = (llama_clear_adapter_lora(ctx), 0);
        for (size_t i = 0; i < adapters.size() && rc == 0; ++i) rc = llama_set_adapter_lora(ctx, adapters[i], scales[i]);
        return rc;
    }
}
template <class P>
void set_flash_attn(P& p, bool on) {
    if constexpr (requires { p.flash_attn_type; }) p.flash_attn_type = decltype(p.flash_attn_type)(on ? 1 : 0);
    else p.flash_attn = on;
}
}  // namespace kvweld::llama_compat
namespace compat = kvweld::llama_compat;
struct Dims { int dim, layers, heads, kv_heads, head_dim, ffn, vocab, ctx_train, experts, experts_used; float rope_theta, norm_eps; };
inline std::vector<float> random_floats(uint64_t seed, uint64_t n, float scale) {
    std::vector<float> out(n);
    for (float& x : out) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL), z = ((z ^ (z >> 27)) * 0x94d049bb133111ebULL);
        x = (float((z ^ (z >> 31)) >> 40) / float(1 << 23) - 1.0f) * scale;
    }
    return out;
}
inline std::string dir;
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
        m.tensor(b + "attn_norm.weight", {D}, 0), m.tensor(b + "ffn_norm.weight", {D}, 0);
        m.tensor(b + "attn_q.weight", {D, Q}, 4), m.tensor(b + "attn_k.weight", {D, K}, 4);
        m.tensor(b + "attn_v.weight", {D, K}), m.tensor(b + "attn_output.weight", {Q, D});
        m.tensor(b + "ffn_gate.weight", {D, F}), m.tensor(b + "ffn_up.weight", {D, F}), m.tensor(b + "ffn_down.weight", {F, D});
    }
    m.tensor("output_norm.weight", {D}, 0), m.tensor("output.weight", {D, d.vocab});
    return m.write(path);
}
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
    return a.write(dir + "/lora.gguf") ? llama_adapter_lora_init(model, (dir + "/lora.gguf").c_str()) : nullptr;
}

// ---- The engine as a server runs it, and its ground truth: two contexts of one model ----
inline int line = 0, n_vocab = 0;
struct Out { double value; int line; const char* what; };
struct Side {
    explicit Side(llama_context* c) : ctx(c) {}
    llama_context* ctx;
    std::vector<Out> out;
    std::string refused;
    llama_memory_t mem() const { return llama_get_memory(ctx); }
};
inline std::vector<Side*> live(std::vector<Side*> sides, int n) {
    line = n;
    sides.erase(std::remove_if(sides.begin(), sides.end(), [](Side* s) { return !s->refused.empty(); }), sides.end());
    return sides;
}
inline void expect(Side& s, bool ok, const std::string& what) {
    if (!ok && s.refused.empty()) s.refused = what + " (trace line " + std::to_string(line) + ")";
}
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
inline llama_context* open_context(llama_model* model, uint32_t n_ctx, uint32_t seqs, bool unified, bool graph_reuse,
                                   float rope_scale, uint32_t n_ubatch, enum llama_pooling_type pooling) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx * seqs, cp.n_seq_max = seqs, cp.n_batch = 512, cp.n_ubatch = n_ubatch, cp.pooling_type = pooling, cp.kv_unified = unified;
    cp.n_threads = cp.n_threads_batch = 1, cp.type_k = cp.type_v = GGML_TYPE_F32, cp.rope_freq_scale = rope_scale, cp.no_perf = false;
    compat::set_flash_attn(cp, false);
    setenv("LLAMA_GRAPH_REUSE_DISABLE", graph_reuse ? "0" : "1", 1);
    llama_context* ctx = llama_init_from_model(model, cp);
    return unsetenv("LLAMA_GRAPH_REUSE_DISABLE"), ctx;
}
inline void keep(Side& s, const float* values, int n, const char* what) {
    for (int j = 0; j < n; ++j) s.out.push_back({values[j], line, what});
}
struct Tok { int seq, token, pos, out; };
inline void decode(Side& s, const std::vector<Tok>& toks) {
    llama_batch b = llama_batch_init(int32_t(toks.size()), 0, 1);
    for (size_t i = 0; i < toks.size(); ++i) {
        b.token[i] = toks[i].token, b.pos[i] = toks[i].pos, b.logits[i] = int8_t(toks[i].out);
        b.n_seq_id[i] = 1, b.seq_id[i][0] = toks[i].seq;
    }
    b.n_tokens = int32_t(toks.size());
    const int32_t rc = llama_decode(s.ctx, b);
    llama_batch_free(b);
    expect(s, rc == 0, "llama_decode returned " + std::to_string(rc));
    for (int32_t i = 0; rc == 0 && i < int32_t(toks.size()); ++i) {
        if (!toks[i].out) continue;
        keep(s, llama_get_logits_ith(s.ctx, i), n_vocab, "logit");
    }
}

// ---- The verdict: the values both sides read, compared in order; the graphs each reused; what each refused ----
inline int report(Side& engine, Side& truth, double tolerance) {
    size_t n = std::min(engine.out.size(), truth.out.size()), at = 0;
    double worst = -1;
    for (size_t j = 0; j < n; ++j)
        if (const double d = std::fabs(engine.out[j].value - truth.out[j].value); d > worst || d != d) worst = d, at = j;
    std::printf("values compared: %zu (the engine read %zu, the ground truth %zu)\n", n, engine.out.size(), truth.out.size());
    if (worst != -1) std::printf("max |%s - expected| = %.6g (tolerance %g) at trace line %d: engine %.6g, expected %.6g\n", engine.out[at].what, worst, tolerance, engine.out[at].line, engine.out[at].value, truth.out[at].value);
    bool shown = worst != -1 && !(worst <= tolerance);
    const int reused = llama_perf_context(engine.ctx).n_reused, expected = llama_perf_context(truth.ctx).n_reused;
    std::printf("graphs reused: engine %d, ground truth %d\n", reused, expected);
    for (const Side* s : {&engine, &truth})
        if (!s->refused.empty()) std::printf("the %s refused %s\n", s == &engine ? "engine" : "ground truth", s->refused.c_str());
    if (!truth.refused.empty() && engine.refused.empty()) return std::printf("INCONCLUSIVE: the ground truth refused a call the engine did not\n"), 2;
    shown = shown || (!engine.refused.empty() && truth.refused.empty());
    std::printf("%s\n", shown ? "FINDING SHOWN: exit 1" : "not shown: exit 0");
    return shown ? 1 : 0;
}

int main() {
    const Dims dims{16, 2, 2, 1, 8, 32, 16, 32, 0, 0, 10000.0f, 9.99999975e-06f};
    llama_model* model = start(dims);
    if (!model) return 2;
    const std::vector<llama_adapter_lora*> lora{load_lora(model, dims, 1000, 2, 2.0f, {{"attn_q", 16, 16}, {"attn_v", 8, 16}, {"ffn_down", 16, 32}})};  // the trace's LoRA adapters, each generated here
    if (std::count(lora.begin(), lora.end(), nullptr)) return 2;
    Side engine{open_context(model, 8, 11, false, true, 1.0f, 512, LLAMA_POOLING_TYPE_UNSPECIFIED)};
    Side truth{open_context(model, 8, 11, false, false, 1.0f, 512, LLAMA_POOLING_TYPE_UNSPECIFIED)};
    if (!engine.ctx || !truth.ctx) return 2;
    const std::vector<Side*> both{&engine, &truth};
    for (Side* s : live(both, 2)) llama_memory_seq_rm(s->mem(), 0, -1, -1);
    for (Side* s : live(both, 3)) llama_memory_seq_rm(s->mem(), 1, -1, -1);
    for (Side* s : live(both, 4)) llama_memory_seq_rm(s->mem(), 8, -1, -1);
    for (Side* s : live(both, 5)) decode(*s, {{8, 0, 0, 1}});
    for (Side* s : live(both, 6)) expect(*s, compat::set_adapters(s->ctx, {lora[0]}, {0.5f}) == 0, "the LoRA adapters");
    for (Side* s : live(both, 7)) decode(*s, {{8, 0, 1, 1}});
    const int verdict = report(engine, truth, 1e-3);
    for (Side* s : both) llama_free(s->ctx);
    llama_model_free(model);
    std::filesystem::remove_all(dir);
    return verdict;
}
