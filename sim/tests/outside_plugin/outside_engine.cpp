// An engine built outside kvweld, as its author would write one: against
// include/kvweld/engine_abi.h alone (its build gives it no other include
// path and links nothing of kvweld). A small llama forward over a llama2.c
// checkpoint, one KV cache per sequence, and one "plan" per batch shape:
// kept while the next call has the same shape, built otherwise. Its reuse
// rule ships in the plugin (ABI 14), so kvweld's accounting oracle judges
// it with no rule of kvweld's own. Its fault switch rebuild_same_shape
// builds where it could keep: the shipped rule makes that a spurious
// invalidation.
#include <kvweld/engine_abi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// Named, not anonymous: the engine's own struct below holds these.
namespace outside {

constexpr float kRopeTheta = 10000.0f, kNormEps = 1e-5f;  // llama2.c's, which its checkpoints do not store

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

// No exception crosses the C boundary: a failure is a non-zero return and
// its message in err.
template <class F>
int guarded(char* err, size_t err_len, F&& f) {
    try {
        f();
        return 0;
    } catch (const std::exception& e) {
        if (err && err_len) std::snprintf(err, err_len, "%s", e.what());
        return 1;
    }
}

struct Config {
    int dim = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0, seq_len = 0;
    bool shared = true;
    int head_dim() const { return dim / heads; }
    int kv_dim() const { return kv_heads * head_dim(); }
};

// A llama2.c checkpoint: a 7-int header, then the weights in its order.
struct Weights {
    Config c;
    std::vector<float> all;
    const float *emb, *att_norm, *wq, *wk, *wv, *wo, *ffn_norm, *w1, *w2, *w3, *final_norm, *cls;
};

Weights load(const char* path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(std::string("cannot open the model ") + path);
    std::int32_t h[7];
    if (!in.read(reinterpret_cast<char*>(h), sizeof h)) fail("the model's header is shorter than 28 bytes");
    Weights w{};
    Config& c = w.c;
    c = {h[0], h[1], h[2], h[3], h[4], h[5] < 0 ? -h[5] : h[5], h[6], h[5] > 0};
    if (c.dim <= 0 || c.ffn <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.vocab <= 0 ||
        c.seq_len <= 0 || c.dim % c.heads || c.heads % c.kv_heads || c.head_dim() % 2)
        fail("the model's header describes no model this engine runs");
    const std::vector<char> rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::size_t L = std::size_t(c.layers), d = std::size_t(c.dim), kv = std::size_t(c.kv_dim()),
                      f = std::size_t(c.ffn), v = std::size_t(c.vocab);
    const std::size_t body = v * d + L * d + L * d * d + 2 * L * kv * d + L * d * d + L * d + 3 * L * f * d + d;
    const std::size_t rope = std::size_t(c.seq_len) * std::size_t(c.head_dim()), cls = c.shared ? 0 : v * d;
    if (rest.size() != (body + rope + cls) * sizeof(float))
        fail("the model holds " + std::to_string(rest.size()) + " bytes of weights, its header needs " +
             std::to_string((body + rope + cls) * sizeof(float)));
    w.all.resize(rest.size() / sizeof(float));
    std::memcpy(w.all.data(), rest.data(), rest.size());
    const float* p = w.all.data();
    const auto take = [&](std::size_t n) { return std::exchange(p, p + n); };
    w.emb = take(v * d), w.att_norm = take(L * d), w.wq = take(L * d * d), w.wk = take(L * kv * d);
    w.wv = take(L * kv * d), w.wo = take(L * d * d), w.ffn_norm = take(L * d), w.w1 = take(L * f * d);
    w.w2 = take(L * d * f), w.w3 = take(L * f * d), w.final_norm = take(d);
    take(rope);
    w.cls = c.shared ? w.emb : take(cls);
    return w;
}

void matmul(float* out, const float* x, const float* w, int rows, int cols) {
    for (int i = 0; i < rows; ++i) {
        float sum = 0.0f;
        for (int j = 0; j < cols; ++j) sum += w[std::size_t(i) * std::size_t(cols) + std::size_t(j)] * x[j];
        out[i] = sum;
    }
}

void rmsnorm(float* out, const float* x, const float* weight, int n) {
    double ss = 0.0;
    for (int j = 0; j < n; ++j) ss += double(x[j]) * x[j];
    const double scale = 1.0 / std::sqrt(ss / n + kNormEps);
    for (int j = 0; j < n; ++j) out[j] = float(weight[j] * (scale * x[j]));
}

void rope(float* vec, int heads, int head_dim, int pos) {
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < head_dim; i += 2) {
            const double angle = pos / std::pow(double(kRopeTheta), double(i) / head_dim);
            float* p = vec + h * head_dim + i;
            const double a = p[0], b = p[1];
            p[0] = float(a * std::cos(angle) - b * std::sin(angle));
            p[1] = float(a * std::sin(angle) + b * std::cos(angle));
        }
}

// One sequence's K and V: [layer][position * kv_dim].
struct Cache {
    int len = -1;  // -1: closed
    std::vector<std::vector<float>> k, v;
};

// One token at `pos` of a sequence: its K and V written, its logits out.
void forward(const Weights& w, Cache& cache, int token, int pos, float* logits) {
    const Config& c = w.c;
    const int d = c.dim, kvd = c.kv_dim(), hd = c.head_dim(), group = c.heads / c.kv_heads;
    std::vector<float> x(w.emb + std::size_t(token) * std::size_t(d), w.emb + std::size_t(token + 1) * std::size_t(d));
    const std::size_t D = std::size_t(d), F = std::size_t(c.ffn);
    std::vector<float> xb(D), q(D), att_out(D), out(D), h1(F), h3(F), att(std::size_t(pos) + 1);
    for (int l = 0; l < c.layers; ++l) {
        const std::size_t L = std::size_t(l);
        float* k = cache.k[L].data() + std::size_t(pos) * std::size_t(kvd);
        float* v = cache.v[L].data() + std::size_t(pos) * std::size_t(kvd);
        rmsnorm(xb.data(), x.data(), w.att_norm + L * std::size_t(d), d);
        matmul(q.data(), xb.data(), w.wq + L * std::size_t(d) * std::size_t(d), d, d);
        matmul(k, xb.data(), w.wk + L * std::size_t(kvd) * std::size_t(d), kvd, d);
        matmul(v, xb.data(), w.wv + L * std::size_t(kvd) * std::size_t(d), kvd, d);
        rope(q.data(), c.heads, hd, pos);
        rope(k, c.kv_heads, hd, pos);
        for (int h = 0; h < c.heads; ++h) {
            const int kvh = h / group;
            double max = -INFINITY, sum = 0.0;
            for (int t = 0; t <= pos; ++t) {
                const float* kt = cache.k[L].data() + std::size_t(t) * std::size_t(kvd) + std::size_t(kvh * hd);
                double score = 0.0;
                for (int i = 0; i < hd; ++i) score += double(q[std::size_t(h * hd + i)]) * kt[i];
                att[std::size_t(t)] = float(score / std::sqrt(double(hd)));
                max = std::max(max, double(att[std::size_t(t)]));
            }
            for (int t = 0; t <= pos; ++t) sum += att[std::size_t(t)] = float(std::exp(att[std::size_t(t)] - max));
            for (int i = 0; i < hd; ++i) {
                double acc = 0.0;
                for (int t = 0; t <= pos; ++t)
                    acc += double(att[std::size_t(t)] / sum) *
                           cache.v[L][std::size_t(t) * std::size_t(kvd) + std::size_t(kvh * hd + i)];
                att_out[std::size_t(h * hd + i)] = float(acc);
            }
        }
        matmul(out.data(), att_out.data(), w.wo + L * std::size_t(d) * std::size_t(d), d, d);
        for (int i = 0; i < d; ++i) x[std::size_t(i)] += out[std::size_t(i)];
        rmsnorm(xb.data(), x.data(), w.ffn_norm + L * std::size_t(d), d);
        matmul(h1.data(), xb.data(), w.w1 + L * std::size_t(c.ffn) * std::size_t(d), c.ffn, d);
        matmul(h3.data(), xb.data(), w.w3 + L * std::size_t(c.ffn) * std::size_t(d), c.ffn, d);
        for (std::size_t i = 0; i < h1.size(); ++i) h1[i] = h1[i] / (1.0f + std::exp(-h1[i])) * h3[i];
        matmul(out.data(), h1.data(), w.w2 + L * std::size_t(d) * std::size_t(c.ffn), d, c.ffn);
        for (int i = 0; i < d; ++i) x[std::size_t(i)] += out[std::size_t(i)];
    }
    rmsnorm(x.data(), x.data(), w.final_norm, d);
    matmul(logits, x.data(), w.cls, c.vocab, d);
}

}  // namespace outside

struct kvweld_engine {
    outside::Weights w;
    int n_ctx = 0;
    bool rebuild_same_shape = false;  // the fault switch
    std::vector<outside::Cache> seqs;
    std::vector<std::int32_t> plan_shape;  // the held plan's batch shape (empty: none)
    kvweld_engine_counters counters{};
};

// The rule, from what the harness did alone: one plan per call, kept when
// the call has the last call's shape (the sequence of each token), built
// otherwise. No memory call changes what a plan bakes in.
struct kvweld_rule {
    std::vector<std::int32_t> last;
    bool reused_last = false;
};

namespace {

using namespace outside;

Cache& open_seq_of(kvweld_engine* e, int32_t seq) {
    if (seq < 0 || seq >= int32_t(e->seqs.size()))
        fail("sequence " + std::to_string(seq) + " out of range 0.." + std::to_string(e->seqs.size() - 1));
    if (e->seqs[std::size_t(seq)].len < 0) fail("sequence " + std::to_string(seq) + " is not open");
    return e->seqs[std::size_t(seq)];
}

int create(const kvweld_engine_options* o, kvweld_engine** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto e = std::make_unique<kvweld_engine>();
        e->w = load(o->model_path);
        // Its settings as data (ABI 16): the host gives only the one fault
        // switch it declared, and no param (it declares none).
        bool rebuild_same_shape = false;
        for (int32_t i = 0; i < o->n_given; ++i) {
            const kvweld_given& g = o->given[i];
            if (g.kind != KVWELD_SETTING_FAULT || std::string(g.name) != "rebuild_same_shape")
                fail(std::string("unknown setting '") + g.name + "': this engine takes only the fault rebuild_same_shape");
            rebuild_same_shape = true;
        }
        if (o->n_ctx < 1 || o->n_ctx > e->w.c.seq_len)
            fail("n_ctx " + std::to_string(o->n_ctx) + " outside 1.." + std::to_string(e->w.c.seq_len));
        if (o->n_seq_max < 1) fail("n_seq_max " + std::to_string(o->n_seq_max) + " below 1");
        e->n_ctx = o->n_ctx;
        e->rebuild_same_shape = rebuild_same_shape;
        e->seqs.resize(std::size_t(o->n_seq_max));
        *out = e.release();
    });
}
void destroy(kvweld_engine* e) { delete e; }
int32_t vocab(const kvweld_engine* e) { return e->w.c.vocab; }

int open_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        if (seq < 0 || seq >= int32_t(e->seqs.size()))
            fail("sequence " + std::to_string(seq) + " out of range 0.." + std::to_string(e->seqs.size() - 1));
        Cache& c = e->seqs[std::size_t(seq)];
        if (c.len >= 0) fail("sequence " + std::to_string(seq) + " is open");
        const std::size_t rows = std::size_t(e->n_ctx) * std::size_t(e->w.c.kv_dim());
        c.k.assign(std::size_t(e->w.c.layers), std::vector<float>(rows));
        c.v.assign(std::size_t(e->w.c.layers), std::vector<float>(rows));
        c.len = 0;
    });
}
int close_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { open_seq_of(e, seq) = Cache{}; });
}
int truncate(kvweld_engine* e, int32_t seq, int32_t n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        Cache& c = open_seq_of(e, seq);
        if (n < 0 || n > c.len)
            fail("truncate to " + std::to_string(n) + " past the length " + std::to_string(c.len));
        c.len = n;
    });
}
int clear_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { open_seq_of(e, seq).len = 0; });
}
int clear_all(kvweld_engine* e, char*, size_t) {
    for (Cache& c : e->seqs)
        if (c.len > 0) c.len = 0;
    return 0;
}

// Every pair checked before any is decoded: a refused call changes nothing.
int decode(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, int32_t n, float* logits, char* err,
           size_t err_len) {
    return guarded(err, err_len, [&] {
        std::vector<int> adds(e->seqs.size());
        for (int32_t i = 0; i < n; ++i) {
            const Cache& c = open_seq_of(e, seqs[i]);
            if (tokens[i] < 0 || tokens[i] >= e->w.c.vocab)
                fail("token " + std::to_string(tokens[i]) + " outside 0.." + std::to_string(e->w.c.vocab - 1));
            if (c.len + ++adds[std::size_t(seqs[i])] > e->n_ctx)
                fail("sequence " + std::to_string(seqs[i]) + " would pass its n_ctx " + std::to_string(e->n_ctx));
        }
        const std::vector<std::int32_t> shape(seqs, seqs + n);
        const bool keep = !e->plan_shape.empty() && shape == e->plan_shape && !e->rebuild_same_shape;
        ++(keep ? e->counters.reused : e->counters.builds);
        e->plan_shape = shape;
        for (int32_t i = 0; i < n; ++i) {
            Cache& c = e->seqs[std::size_t(seqs[i])];
            forward(e->w, c, tokens[i], c.len, logits + std::size_t(i) * std::size_t(e->w.c.vocab));
            ++c.len;
        }
    });
}
int counters(const kvweld_engine* e, kvweld_engine_counters* out, char*, size_t) {
    *out = e->counters;
    return 0;
}

int rule_create(const kvweld_engine_options*, kvweld_rule** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { *out = new kvweld_rule(); });
}
void rule_destroy(kvweld_rule* r) { delete r; }
int rule_on_call(kvweld_rule*, const kvweld_call*, char*, size_t) { return 0; }  // no call changes a plan
int rule_on_decode(kvweld_rule* r, const int32_t* seqs, const uint8_t*, int32_t n, kvweld_expectation* out, char*,
                   size_t) {
    const std::vector<std::int32_t> shape(seqs, seqs + n);
    r->reused_last = !r->last.empty() && shape == r->last;
    r->last = shape;
    *out = {1, r->reused_last ? 1 : 0, 0, r->reused_last ? 0 : 1, 0};
    return 0;
}
void rule_why(const kvweld_rule* r, char* out, size_t len) {
    std::snprintf(out, len, "%s", r->reused_last ? "the last call's shape: its plan must be kept"
                                                 : "a new shape (or the first call): one plan built");
}

// Its settings, as data (ABI 15): no params, no live settings, one fault
// switch and the failure class it may show as.
const char* const kRebuildClasses[] = {"spurious_invalidation", nullptr};
const kvweld_setting kSettings[] = {
    {KVWELD_SETTING_FAULT, "rebuild_same_shape", kRebuildClasses, "builds a plan where the batch shape repeats"},
};

const kvweld_engine_api kApi = {
    .abi_version = KVWELD_ENGINE_ABI_VERSION,
    .name = "outside-example",
    .model_format = "llama2c",
    .capabilities = KVWELD_CAP_PLAN_COUNTERS,
    .fault_names = nullptr,  // its settings
    .create = nullptr,  // create_v16
    .destroy = destroy,
    .vocab = vocab,
    .open_seq = open_seq,
    .close_seq = close_seq,
    .decode = decode,
    .truncate = truncate,
    .clear_seq = clear_seq,
    .clear_all = clear_all,
    .copy_seq = nullptr,
    .counters = counters,
    .reload = nullptr,
    .storage = nullptr,
    .read_kv = nullptr,
    .swap_layer = nullptr,
    .pool_info = nullptr,
    .block_table = nullptr,
    .block_refcount = nullptr,
    .pool_op = nullptr,
    .plan_serial = nullptr,
    .set_loras = nullptr,
    .set_cvec = nullptr,
    .decode_outputs = nullptr,
    .set_warmup = nullptr,
    .no_reuse_param = nullptr,
    .twin_tolerance = nullptr,
    .shift = nullptr,
    .state_save = nullptr,
    .state_load = nullptr,
    .build = "outside-example 1",
    .live_settings = nullptr,
    .set_live = nullptr,
    .read_embeddings = nullptr,
    .set_sampler = nullptr,
    .sampled = nullptr,
    .set_abort = nullptr,
    .seq_length = nullptr,
    .live_settings_of = nullptr,
    .struct_size = sizeof(kvweld_engine_api),
    .keep_seq = nullptr,
    .rule_create = rule_create,
    .rule_destroy = rule_destroy,
    .rule_on_call = rule_on_call,
    .rule_on_decode = rule_on_decode,
    .rule_why = rule_why,
    .settings = kSettings,
    .n_settings = 1,
    .create_v16 = create,
    .takes_live = nullptr,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) { return &kApi; }
