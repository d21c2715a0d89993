// kvweld's own engine behind the plugin ABI (include/kvweld/engine_abi.h):
// one KvCache and one DecodeSession (one held plan) per sequence, over a
// model loaded from the llama2.c checkpoint the harness wrote. It exists so
// that the ABI is exercised by an engine with fault switches.
#include "engine/checkpoint.hpp"
#include "engine/decode_session.hpp"
#include "engine/error.hpp"
#include "engine/faults.hpp"
#include "engine/recycling_resource.hpp"
#include "adapters/abi_guard.hpp"
#include "adapters/abi_lists.hpp"
#include "kvweld/engine_abi.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>

struct kvweld_engine {
    // Declared first, so it outlives the model: a reloaded model lands at
    // its predecessor's address, as in kvweld's own simulator, so a plan
    // keyed by the weights' address is fooled (weight_pointer_key).
    std::unique_ptr<kvweld::RecyclingResource> pool = std::make_unique<kvweld::RecyclingResource>();
    std::optional<kvweld::Model> model;  // always set; optional so a reload can free it first
    int n_ctx = 0, n_seq_max = 0, threads = 1;
    kvweld::FaultSet faults;  // installed around every call (they are per thread)
    struct Seq {
        kvweld::KvCache cache;
        kvweld::DecodeSession session;
    };
    std::map<int, Seq> seqs;
};

namespace {

using kvweld::require;

// Every call runs with the engine's fault switches on, on the caller's thread.
template <class Fn>
int guarded(const kvweld_engine* e, char* err, size_t err_len, Fn&& fn) {
    return kvweld::abi::guarded(err, err_len, [&] {
        const kvweld::ScopedFaults scoped(e->faults);
        fn();
    });
}
using kvweld::abi::guarded;

// For a const engine, a const sequence.
template <class Engine>
auto& seq_of(Engine* e, int32_t seq) {
    const auto it = e->seqs.find(seq);
    require(it != e->seqs.end(), "sequence ", seq, " is not open");
    return it->second;
}

kvweld::KvCache fresh_cache(const kvweld_engine* e) {
    kvweld::KvGeometry g = kvweld::KvGeometry::of(e->model->config());
    g.max_seq_len = e->n_ctx;
    return kvweld::KvCache::with_capacity(g);
}

int create(const kvweld_engine_options* o, kvweld_engine** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(o && o->model_path, "no options or model path");
        auto pool = std::make_unique<kvweld::RecyclingResource>();
        kvweld::Model model = kvweld::load_llama2c(o->model_path, pool.get());
        auto e = std::make_unique<kvweld_engine>(kvweld_engine{std::move(pool), std::move(model), 0, 0, 1, {}, {}});
        const int max_ctx = e->model->config().max_seq_len;
        require(o->n_ctx >= 1 && o->n_ctx <= max_ctx, "n_ctx = ", o->n_ctx, ": must be in 1..", max_ctx);
        require(o->n_seq_max >= 1 && o->n_seq_max <= 4096, "n_seq_max = ", o->n_seq_max, ": must be in 1..4096");
        e->n_ctx = o->n_ctx;
        e->n_seq_max = o->n_seq_max;
        e->threads = std::max(1, o->threads);
        kvweld::abi::parse_params(o->params, {});  // no settings: any is refused, by name
        for (const std::string& name : kvweld::abi::split_list(o->faults)) {
            const auto f = kvweld::fault_from_name(name);
            require(f.has_value(), "unknown fault '", name, "': known faults are ", kvweld::fault_names());
            e->faults.add(*f);
        }
        require(e->faults.empty() || kvweld::kFaultsCompiled, "faults requested from a plugin built without them");
        *out = e.release();
    });
}

void destroy(kvweld_engine* e) { delete e; }

int32_t vocab(const kvweld_engine* e) { return e->model->config().vocab; }

int open_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        require(seq >= 0 && seq < e->n_seq_max, "sequence ", seq, " out of range 0..", e->n_seq_max - 1);
        require(!e->seqs.count(seq), "sequence ", seq, " is already open");
        e->seqs.emplace(seq, kvweld_engine::Seq{fresh_cache(e), kvweld::DecodeSession({.threads = e->threads})});
    });
}

int close_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        seq_of(e, seq);
        e->seqs.erase(seq);
    });
}

int decode(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, int32_t n, float* logits, char* err,
           size_t err_len) {
    return guarded(e, err, err_len, [&] {
        require(n >= 0, "decode of ", n, " pairs");
        const auto v = static_cast<std::size_t>(vocab(e));
        for (int32_t i = 0; i < n; ++i) {
            kvweld_engine::Seq& s = seq_of(e, seqs[i]);
            const std::span<const float> row = s.session.decode(*e->model, s.cache, tokens[i]);
            std::copy(row.begin(), row.end(), logits + static_cast<std::size_t>(i) * v);
        }
    });
}

int truncate(kvweld_engine* e, int32_t seq, int32_t n, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] { seq_of(e, seq).cache.truncate_to(n); });
}

int clear_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] { seq_of(e, seq).cache.clear(); });
}

int clear_all(kvweld_engine* e, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        for (auto& [id, s] : e->seqs) s.cache.clear();
    });
}

// dst gets a cache of its own holding src's rows (new storage, new id).
int copy_seq(kvweld_engine* e, int32_t src, int32_t dst, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld_engine::Seq& from = seq_of(e, src);
        kvweld_engine::Seq& to = seq_of(e, dst);
        kvweld::KvCache copy = fresh_cache(e);
        for (int l = 0; l < copy.n_layers(); ++l) copy.set_layer(l, from.cache.layer(l)->copy());
        for (int i = 0; i < from.cache.cached_len(); ++i) copy.advance();
        to.cache = std::move(copy);
    });
}

// The old model goes first, so the new one can take its address; every
// sequence is emptied (its storage replaced, as clear() does).
int reload(kvweld_engine* e, const char* path, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        require(path != nullptr, "reload: no model path");
        // Checked in full before the old model goes, so a bad file loses nothing.
        kvweld::Model checked = kvweld::load_llama2c(path);
        require(checked.config() == e->model->config(), "reload: ", path, " holds a model of another shape");
        e->model.reset();
        try {
            e->model.emplace(kvweld::load_llama2c(path, e->pool.get()));
        } catch (const kvweld::Error&) {  // the file changed under us: keep what was checked
            e->model.emplace(std::move(checked));
        }
        for (auto& [id, s] : e->seqs) s.cache.clear();
    });
}

int storage(const kvweld_engine* e, int32_t seq, int32_t which, uint64_t* out, int32_t n_layers, char* err,
            size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld_engine::Seq& s = seq_of(e, seq);
        require(n_layers == s.cache.n_layers(), "storage: ", n_layers, " layers asked for, the model has ",
                s.cache.n_layers());
        require(which == KVWELD_STORAGE_HELD || which == KVWELD_STORAGE_PLAN, "storage: which = ", which);
        const std::vector<kvweld::StorageSerial> serials =
            which == KVWELD_STORAGE_HELD ? s.cache.storage_serials() : s.session.bound_serials();
        for (int32_t l = 0; l < n_layers; ++l) out[l] = std::size_t(l) < serials.size() ? serials[std::size_t(l)].get() : 0;
    });
}

int read_kv(const kvweld_engine* e, int32_t seq, int32_t layer, int32_t pos, float* k, float* v, int32_t kv_dim,
            char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld_engine::Seq& s = seq_of(e, seq);
        require(layer >= 0 && layer < s.cache.n_layers(), "read_kv: layer ", layer, " out of range 0..",
                s.cache.n_layers() - 1);
        require(pos >= 0 && pos < s.cache.cached_len(), "read_kv: position ", pos, " out of range 0..",
                s.cache.cached_len() - 1);
        const kvweld::KvStorage& storage = *s.cache.layer(layer);
        require(kv_dim == storage.kv_dim(), "read_kv: kv_dim ", kv_dim, ", the model's is ", storage.kv_dim());
        std::copy_n(storage.key_row(pos), kv_dim, k);
        std::copy_n(storage.value_row(pos), kv_dim, v);
    });
}

int swap_layer(kvweld_engine* e, int32_t seq, int32_t layer, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        kvweld_engine::Seq& s = seq_of(e, seq);
        require(layer >= 0 && layer < s.cache.n_layers(), "swap_layer: layer ", layer, " out of range 0..",
                s.cache.n_layers() - 1);
        s.cache.set_layer(layer, s.cache.layer(layer)->copy());
    });
}

int counters(const kvweld_engine* e, kvweld_engine_counters* out, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        *out = {};
        for (const auto& [id, s] : e->seqs) {
            out->builds += s.session.counters().builds;
            out->reused += s.session.counters().kept;
            out->rebound += s.session.counters().rebinds;
        }
    });
}

// The engine's fault switches this ABI can reach (none in a build without
// KVWELD_FAULTS), as the ABI lists them: comma-separated. Left out, because
// nothing behind this ABI makes them act: a rebind always serves, so the
// only rebuilds are a sequence's first and those after a reload, which the
// fault does not touch (build_counted_as_kept); and spec_reject_off_by_one
// lives in kvweld's own simulator.
bool reachable(kvweld::Fault f) {
    using F = kvweld::Fault;
    for (F out : {F::build_counted_as_kept, F::spec_reject_off_by_one})
        if (f == out) return false;
    return true;
}

const char* fault_list() {
    static const std::string names = [] {
        std::string out;
        if (kvweld::kFaultsCompiled)
            for (const kvweld::FaultInfo& f : kvweld::all_faults())
                if (reachable(f.fault)) out += (out.empty() ? "" : ",") + std::string(f.name);
        return out;
    }();
    return names.c_str();
}

const kvweld_engine_api kApi = {
    KVWELD_ENGINE_ABI_VERSION, "kvweld", "llama2c",
    KVWELD_CAP_COPY_SEQ | KVWELD_CAP_PLAN_COUNTERS | KVWELD_CAP_RELOAD | KVWELD_CAP_STORAGE | KVWELD_CAP_READ_KV |
        KVWELD_CAP_SWAP_LAYER,
    fault_list(),
    create, destroy, vocab, open_seq, close_seq, decode, truncate, clear_seq, clear_all, copy_seq, counters, reload,
    storage, read_kv, swap_layer,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) { return &kApi; }
