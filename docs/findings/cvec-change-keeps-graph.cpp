// A standalone reproducer of llama.cpp finding 'cvec-change-keeps-graph', written by kvweld from its
// trace (kvweld repro targets/llamacpp/findings/0.3.16/cvec_change_keeps_graph.jsonl). It uses llama.h and libllama alone:
//   c++ -std=c++20 repro.cpp -I<llama.cpp>/include -L<llama.cpp>/lib -lllama -lggml -lggml-base -o repro
// The engine: one llama.cpp context, as a server drives it (graph_reuse=1,kv_unified=0,rope_scale=0.5).
// The ground truth: a second context of the same model (graph_reuse=0,kv_unified=0,rope_scale=0.5),
// given the same calls. Exit 1: the finding shows (the numbers are printed); 0: it does not.

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <gguf.h>
#include <llama.h>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

// ---- kvweld's llama_compat.hpp, stripped to this program: what llama.h renamed between releases ----
namespace kvweld::llama_compat {
template <class C = llama_context>
int32_t set_cvec(C* ctx, const float* data, std::size_t len, int32_t n_embd, int32_t il_start, int32_t il_end) {
    if constexpr (requires { llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end); })
        return llama_set_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
    else if constexpr (requires { llama_apply_adapter_cvec(ctx, data, len, n_embd, il_start, il_end); })
        return llama_apply_adapter_cvec(ctx, data, len, n_embd, il_start, il_end);
    else
        return -1;
}
template <class P>
void set_flash_attn(P& params, bool on) {
    if constexpr (requires { params.flash_attn_type; })
        params.flash_attn_type = decltype(params.flash_attn_type)(on ? 1 : 0);  // ENABLED = 1, DISABLED = 0
    else
        params.flash_attn = on;
}
}  // namespace kvweld::llama_compat

// ---- kvweld's llamacpp_repro_prelude.hpp, stripped to this program ----
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
    const int64_t D = d.dim, Q = int64_t(d.heads) * d.head_dim, K = int64_t(d.kv_heads) * d.head_dim, F = d.ffn, V = d.vocab;
    m.tensor("token_embd.weight", {D, V});
    for (int l = 0; l < d.layers; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        for (const auto& [name, ne, gain] : std::vector<std::tuple<const char*, std::vector<int64_t>, float>>{
                 {"attn_norm", {D}, 0.0f}, {"attn_q", {D, Q}, 4.0f}, {"attn_k", {D, K}, 4.0f}, {"attn_v", {D, K}, 1.0f},
                 {"attn_output", {Q, D}, 1.0f}, {"ffn_norm", {D}, 0.0f}})
            m.tensor(b + name + ".weight", ne, gain);
        for (const auto& [name, ne] : std::vector<std::pair<const char*, std::vector<int64_t>>>{
                 {"ffn_gate", {D, F}}, {"ffn_up", {D, F}}, {"ffn_down", {F, D}}})
            m.tensor(b + name + ".weight", ne);
    }
    m.tensor("output_norm.weight", {D}, 0);
    m.tensor("output.weight", {D, V});
    return m.write(path);
}
inline int32_t set_adapter_cvec(llama_context* ctx, const float* data, size_t len, int32_t n_embd, int32_t il_start,
                                int32_t il_end) {
    return kvweld::llama_compat::set_cvec(ctx, data, len, n_embd, il_start, il_end);
}

// ---- The engine as a server runs it, and its ground truth: two contexts of one model ----
inline int line = 0;  // the trace line being run
inline int32_t n_vocab = 0;
struct Side {
    llama_context* ctx = nullptr;
    std::vector<std::vector<float>> rows;  // per decode call: its output rows, back to back
    std::vector<int> row_lines;            // the trace line of each
    std::string refused;                   // the first call it refused, and where; it makes no call after it
    llama_memory_t mem() const { return llama_get_memory(ctx); }
};
inline std::vector<Side*> live(std::vector<Side*> sides) {  // those that refused no call yet
    sides.erase(std::remove_if(sides.begin(), sides.end(), [](Side* s) { return !s->refused.empty(); }), sides.end());
    return sides;
}
inline void expect(Side& s, bool ok, const std::string& what) {
    if (!ok && s.refused.empty()) s.refused = what + " (trace line " + std::to_string(line) + ")";
}
inline void on_abort(int) {
    char text[96];
    const int n = std::snprintf(text, sizeof text, "FINDING SHOWN: llama.cpp aborted the process at trace line %d: exit 1\n", line);
    if (n > 0) (void)!write(2, text, size_t(n));
    _exit(1);
}
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
    setenv("LLAMA_GRAPH_REUSE_DISABLE", graph_reuse ? "0" : "1", 1);  // read when a context is made
    llama_context* ctx = llama_init_from_model(model, cp);
    unsetenv("LLAMA_GRAPH_REUSE_DISABLE");
    return ctx;
}
struct Tok {
    int seq, token, pos, out;
};
inline void decode(Side& s, const std::vector<Tok>& toks) {
    llama_batch b = llama_batch_init(int32_t(toks.size()), 0, 1);
    for (size_t i = 0; i < toks.size(); ++i) {
        b.token[i] = toks[i].token, b.pos[i] = toks[i].pos, b.logits[i] = int8_t(toks[i].out);
        b.n_seq_id[i] = 1, b.seq_id[i][0] = toks[i].seq;
    }
    b.n_tokens = int32_t(toks.size());
    bool stopped = false;  // by the abort callback: llama_decode returns 2, and no rows
    const int32_t rc = llama_decode(s.ctx, b);
    expect(s, rc == 0 || stopped, "llama_decode returned " + std::to_string(rc));
    if (rc == 0) {
        s.rows.emplace_back();
        s.row_lines.push_back(line);
        for (size_t i = 0; i < toks.size(); ++i) {
            if (!toks[i].out) continue;
            const float* row = llama_get_logits_ith(s.ctx, int32_t(i));
            s.rows.back().insert(s.rows.back().end(), row, row + n_vocab);
        }
    }
    llama_batch_free(b);
}
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

int main() {
    const Dims dims{16, 2, 2, 1, 8, 32, 16, 32, 0, 0, 10000.0f, 9.99999975e-06f};
    llama_model* model = start(dims);
    if (!model) return 2;
    std::vector<std::vector<float>> cvec;  // the trace's control vectors, each generated here
    cvec.push_back(random_floats(2000, uint64_t(dims.dim) * (dims.layers - 1), 0.5f));
    Side engine, truth;
    engine.ctx = open_context(model, 2, 4, false, true, 0.5f, 512, LLAMA_POOLING_TYPE_UNSPECIFIED);
    truth.ctx = open_context(model, 2, 4, false, false, 0.5f, 512, LLAMA_POOLING_TYPE_UNSPECIFIED);
    if (!engine.ctx || !truth.ctx) return 2;
    const std::vector<Side*> both{&engine, &truth};
    line = 2;  // {"capacity":0,"max_new":0,"op":"admit","pick":3035172743,"prompt":[0],"recycle":true}
    for (Side* s : live(both)) llama_memory_seq_rm(s->mem(), 3, -1, -1);
    line = 3;  // {"op":"step","outputs":"last","seed":0,"wants":[0,0,0,1,0]}
    for (Side* s : live(both)) decode(*s, {{3, 0, 0, 1}});
    line = 4;  // {"end":1,"op":"cvec","seed":0,"start":1}
    for (Side* s : live(both)) expect(*s, set_adapter_cvec(s->ctx, cvec[0].data(), cvec[0].size(), dims.dim, 1, 1) == 0, "the control vector");
    line = 5;  // {"op":"retire","pick":0}
    for (Side* s : live(both)) llama_memory_seq_rm(s->mem(), 3, -1, -1);
    line = 6;  // {"capacity":0,"max_new":0,"op":"admit","pick":3738413083,"prompt":[0],"recycle":true}
    for (Side* s : live(both)) llama_memory_seq_rm(s->mem(), 3, -1, -1);
    line = 7;  // {"op":"step","outputs":"last","seed":0,"wants":[0,0,0,1,1]}
    for (Side* s : live(both)) decode(*s, {{3, 0, 0, 1}});
    const int verdict = report(engine, truth, false, 1e-3);
    llama_free(engine.ctx);
    llama_free(truth.ctx);
    llama_model_free(model);
    remove_files();
    return verdict;
}
