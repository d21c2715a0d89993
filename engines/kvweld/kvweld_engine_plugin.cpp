// kvweld's own engine behind the plugin ABI (include/kvweld/engine_abi.h):
// one KvCache and one DecodeSession (one held plan) per sequence, over a
// model loaded from the llama2.c checkpoint the harness wrote. It exists so
// that the ABI is exercised by an engine with fault switches.
#include "engines/kvweld/kvweld_plugin_base.hpp"
#include "engine/decode_session.hpp"

#include <cstring>
#include <map>
#include <string_view>

struct kvweld_engine : kvweld::abi::PluginBase {
    struct Seq {
        kvweld::KvCache cache;
        kvweld::DecodeSession session;
    };
    std::map<int, Seq> seqs;
    // What closed sequences' sessions counted: the counters never go down.
    kvweld_engine_counters closed{};
};

namespace {

using kvweld::require;

using kvweld::abi::guarded;
using kvweld::abi::require_openable;
using kvweld::abi::seq_of;

kvweld::KvCache fresh_cache(const kvweld_engine* e) {
    kvweld::KvGeometry g = kvweld::KvGeometry::of(e->model->config());
    g.max_seq_len = e->n_ctx;
    return kvweld::KvCache::with_capacity(g);
}

const std::string& fault_list();

int create(const kvweld_engine_options* o, kvweld_engine** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto e = std::make_unique<kvweld_engine>();
        kvweld::abi::init_base(*e, o, fault_list());
        kvweld::abi::parse_params(o->params, {});  // no settings: any is refused, by name
        *out = e.release();
    });
}

void destroy(kvweld_engine* e) { delete e; }

int32_t vocab(const kvweld_engine* e) { return e->model->config().vocab; }

int open_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        require_openable(e, seq);
        e->seqs.emplace(seq, kvweld_engine::Seq{fresh_cache(e), kvweld::DecodeSession({.threads = e->threads})});
    });
}

int close_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld::SessionCounters& c = seq_of(e, seq).session.counters();
        e->closed.builds += c.builds;
        e->closed.reused += c.kept;
        e->closed.rebound += c.rebinds;
        e->seqs.erase(seq);
    });
}

int decode(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, int32_t n, float* logits, char* err,
           size_t err_len) {
    return guarded(e, err, err_len, [&] {
        kvweld::abi::require_batch(e, seqs, tokens, n, [&](int32_t seq) { return seq_of(e, seq).cache.cached_len(); });
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
        kvweld::abi::require_distinct(src, dst);
        const kvweld_engine::Seq& from = seq_of(e, src);
        kvweld_engine::Seq& to = seq_of(e, dst);
        kvweld::KvCache copy = fresh_cache(e);
        for (int l = 0; l < copy.n_layers(); ++l) copy.set_layer(l, from.cache.layer(l)->copy());
        for (int i = 0; i < from.cache.cached_len(); ++i) copy.advance();
        to.cache = std::move(copy);
    });
}

// Every sequence is emptied (its storage replaced, as clear() does).
int reload(kvweld_engine* e, const char* path, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        kvweld::abi::reload_model(*e, path);
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
        *out = e->closed;
        for (const auto& [id, s] : e->seqs) {
            out->builds += s.session.counters().builds;
            out->reused += s.session.counters().kept;
            out->rebound += s.session.counters().rebinds;
        }
    });
}

// The engine's fault switches this ABI can reach (none in a build without
// KVWELD_FAULTS), as the ABI lists them: comma-separated. Left out: the
// paged design's, and spec_reject_off_by_one, which lives in kvweld's own
// simulator. build_counted_as_kept acts here: a reload keeps each
// sequence's session, whose next key check is stale(model_instance), and
// the plan identity (plan_serial) shows the uncounted build.
const std::string& fault_list() {
    static const std::string names = kvweld::abi::fault_names_for([](const kvweld::FaultInfo& f) {
        return f.design != kvweld::FaultDesign::paged && f.fault != kvweld::Fault::spec_reject_off_by_one;
    });
    return names;
}

int plan_serial(const kvweld_engine* e, int32_t seq, uint64_t* out, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] { *out = seq_of(e, seq).session.plan_serial().get(); });
}

const kvweld_engine_api kApi = {
    KVWELD_ENGINE_ABI_VERSION, "kvweld", "llama2c",
    KVWELD_CAP_COPY_SEQ | KVWELD_CAP_PLAN_COUNTERS | KVWELD_CAP_RELOAD | KVWELD_CAP_STORAGE | KVWELD_CAP_READ_KV |
        KVWELD_CAP_SWAP_LAYER | KVWELD_CAP_PLAN_SERIAL,
    fault_list().c_str(),
    create, destroy, vocab, open_seq, close_seq, decode, truncate, clear_seq, clear_all, copy_seq, counters, reload,
    storage, read_kv, swap_layer,
    nullptr, nullptr, nullptr, nullptr,  // dense KV: no pool (the paged engine is kvweld_paged_plugin.cpp)
    plan_serial,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) { return &kApi; }
