// kvweld's paged engine behind the plugin ABI (`--engine kvweld-paged`):
// one KV pool of fixed-size blocks for every sequence (engine/kv_pool.hpp),
// a sequence being a block table plus a length, and ONE DecodeSession (one
// held plan) for all of them: the block table is per-step data, so opening,
// closing, forking, truncating and compacting never move the plan; only a
// new pool storage (grow: a rebind) or a new model (reload: a build) do.
//
// Settings (targets/kvweld/paged_params.hpp): block=B, blocks=N,
// backend=cpu|cuda. A decode
// that needs a block when none is free grows the pool to twice its size
// first, as a server would rather than fail the request; copy_seq shares
// the source's blocks (copy on write). LoRA adapters and a control vector
// are the engine's (they survive a reload): the adapter set is in the one
// plan's key, scales and the vector are step data, as in the dense engine.
#include "targets/kvweld/kvweld_plugin_base.hpp"
#include "targets/kvweld/paged_params.hpp"
#include "engine/decode_session.hpp"
#include "engine/kv_pool.hpp"

#include <map>

struct kvweld_engine : kvweld::abi::PluginBase {
    std::optional<kvweld::KvPool> pool_kv;  // set at create
    kvweld::DecodeSession session;          // the one held plan
    std::map<int, kvweld::PagedSequence> seqs;
    kvweld::Adapters adapters;
    kvweld::abi::LoraFiles lora_files;
};

namespace {

using kvweld::require;

using kvweld::abi::guarded;
using kvweld::abi::require_openable;
using kvweld::abi::seq_of;

// The paged design's faults, and those of the dense design that a paged
// plan can show too (its key, its per-step offset and mask).
const std::string& fault_list() {
    static const std::string names = kvweld::abi::fault_names_for(
        [](const kvweld::FaultInfo& f) { return f.design != kvweld::FaultDesign::dense; });
    return names;
}

// Its settings as data (ABI 15; targets/kvweld/paged_params.hpp checks the values).
const kvweld::abi::SettingsTable& settings() {
    static const kvweld::abi::SettingsTable table = [] {
        kvweld::abi::SettingsTable t;
        t.add(KVWELD_SETTING_PARAM, "block", {}, "positions per block, a power of two in 1..1024 (default 16)");
        t.add(KVWELD_SETTING_PARAM, "blocks", {}, "blocks the pool starts with (default: every sequence full)");
        t.add(KVWELD_SETTING_PARAM, "backend", {"cpu", "cuda"}, "where the plan runs");
        t.add_list(KVWELD_SETTING_LIVE, kvweld::abi::kThreadsSetting);
        t.add_list(KVWELD_SETTING_FAULT, fault_list().c_str());
        return t;
    }();
    return table;
}

int create(const kvweld_engine_options* o, kvweld_engine** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto e = std::make_unique<kvweld_engine>();
        const kvweld::abi::Given given = kvweld::abi::init_base(*e, o, fault_list());
        const kvweld::abi::PagedParams p = kvweld::abi::paged_params(given.params_text().c_str(), e->n_seq_max, e->n_ctx);
        e->pool_kv.emplace(kvweld::KvGeometry::of(e->model->config()), p.block, p.blocks);
        const kvweld::Backend backend = kvweld::backend_from_string(p.backend);
        std::string why;
        require(backend != kvweld::Backend::cuda || kvweld::cuda_backend_available(&why), "backend=cuda: ", why);
        e->session = kvweld::DecodeSession({.backend = backend, .threads = e->threads});
        *out = e.release();
    });
}

void destroy(kvweld_engine* e) { delete e; }

int32_t vocab(const kvweld_engine* e) { return e->model->config().vocab; }

int open_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        require_openable(e, seq);
        e->seqs.emplace(seq, kvweld::PagedSequence{});
    });
}

int close_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        seq_of(e, seq).release_all(*e->pool_kv);
        e->seqs.erase(seq);
    });
}

// Whether appending to `s` takes a block: its last is full (or it has
// none), or shared with a fork (copy on write).
bool needs_block(const kvweld::KvPool& pool, const kvweld::PagedSequence& s) {
    return s.length() % pool.block_size() == 0 || pool.refcount(s.table().back()) > 1;
}

// Every pair is decoded (its KV written); a row is returned for each pair
// `outputs` wants (all when it is null).
void decode_pairs(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, const uint8_t* outputs, int32_t n,
                  float* logits) {
    kvweld::abi::require_batch(e, seqs, tokens, n, [&](int32_t seq) { return seq_of(e, seq).length(); });
    const auto v = static_cast<std::size_t>(vocab(e));
    kvweld::KvPool& pool = *e->pool_kv;
    std::size_t rows = 0;
    for (int32_t i = 0; i < n; ++i) {
        kvweld::PagedSequence& s = seq_of(e, seqs[i]);
        if (pool.free_blocks() == 0 && needs_block(pool, s)) pool.grow(kvweld::abi::grown_blocks(pool.n_blocks()));
        const std::span<const float> row = e->session.decode(*e->model, pool, s, tokens[i], e->adapters);
        if (!outputs || outputs[i]) std::copy(row.begin(), row.end(), logits + v * rows++);
    }
}

int decode(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, int32_t n, float* logits, char* err,
           size_t err_len) {
    return guarded(e, err, err_len, [&] { decode_pairs(e, seqs, tokens, nullptr, n, logits); });
}

int decode_outputs(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, const uint8_t* outputs, int32_t n,
                   float* logits, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        require(outputs != nullptr, "decode_outputs of ", n, " pairs without output flags");
        decode_pairs(e, seqs, tokens, outputs, n, logits);
    });
}

int set_warmup(kvweld_engine* e, int32_t on, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        require(on == 0 || on == 1, "set_warmup: on = ", on, ": must be 0 or 1");
        e->adapters.set_warmup(on == 1);
    });
}

// ABI 9: n_threads, the one session's CPU plan threads (step data: the plan is kept).
int set_live(kvweld_engine* e, const char* key, const char* value, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] { e->session.set_threads(kvweld::abi::threads_value(key, value)); });
}

// Every file is read and checked before the adapters change.
int set_loras(kvweld_engine* e, const char* const* paths, const float* scales, int32_t n, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld::ModelConfig& c = e->model->config();
        e->adapters.set_loras(c, kvweld::abi::lora_uses(e->lora_files, paths, scales, n, c));
    });
}

int set_cvec(kvweld_engine* e, const float* data, size_t len, int32_t n_embd, int32_t il_start, int32_t il_end,
             char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld::ModelConfig& c = e->model->config();
        e->adapters.set_cvec(c, kvweld::abi::cvec_of(data, len, n_embd, il_start, il_end, c));
    });
}

int truncate(kvweld_engine* e, int32_t seq, int32_t n, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] { seq_of(e, seq).truncate_to(*e->pool_kv, n); });
}

int clear_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] { seq_of(e, seq).release_all(*e->pool_kv); });
}

int clear_all(kvweld_engine* e, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        for (auto& [id, s] : e->seqs) s.release_all(*e->pool_kv);
    });
}

// dst shares every block of src (prefix sharing; copy on write later).
int copy_seq(kvweld_engine* e, int32_t src, int32_t dst, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        kvweld::abi::require_distinct(src, dst);
        const kvweld::PagedSequence& from = seq_of(e, src);
        kvweld::PagedSequence& to = seq_of(e, dst);
        to.release_all(*e->pool_kv);
        to = from.fork(*e->pool_kv);
    });
}

// A new model: every sequence is emptied; the pool stays.
int reload(kvweld_engine* e, const char* path, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        kvweld::abi::reload_model(*e, path);
        for (auto& [id, s] : e->seqs) s.release_all(*e->pool_kv);
    });
}

int read_kv(const kvweld_engine* e, int32_t seq, int32_t layer, int32_t pos, float* k, float* v, int32_t kv_dim,
            char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld::PagedSequence& s = seq_of(e, seq);
        const kvweld::KvPool& pool = *e->pool_kv;
        pool.download();  // a CUDA plan writes the device copy
        require(layer >= 0 && layer < pool.n_layers(), "read_kv: layer ", layer, " out of range 0..", pool.n_layers() - 1);
        require(kv_dim == pool.kv_dim(), "read_kv: kv_dim ", kv_dim, ", the model's is ", pool.kv_dim());
        const auto [block, offset] = s.locate(pool, pos);  // an Error past the length
        std::copy_n(pool.key(layer, block, offset), kv_dim, k);
        std::copy_n(pool.value(layer, block, offset), kv_dim, v);
    });
}

int counters(const kvweld_engine* e, kvweld_engine_counters* out, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld::SessionCounters& c = e->session.counters();
        *out = {c.builds, c.kept, c.rebinds};
    });
}

int pool_info(const kvweld_engine* e, kvweld_pool_info* out, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        const kvweld::KvPool& pool = *e->pool_kv;
        const std::vector<kvweld::StorageSerial> plan = e->session.bound_serials();
        *out = {pool.block_size(), pool.n_blocks(), pool.free_blocks(), pool.storage()->serial().get(),
                plan.empty() ? 0 : plan.front().get()};
    });
}

int block_table(const kvweld_engine* e, int32_t seq, int32_t* out, int32_t cap, int32_t* n, char* err,
                size_t err_len) {
    return guarded(e, err, err_len, [&] {
        require(out != nullptr || cap == 0, "block_table: no output buffer");
        const auto& table = seq_of(e, seq).table();
        *n = static_cast<int32_t>(table.size());
        std::copy_n(table.begin(), std::min<std::size_t>(table.size(), std::size_t(std::max(cap, 0))), out);
    });
}

int block_refcount(const kvweld_engine* e, int32_t block, int32_t* out, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] { *out = e->pool_kv->refcount(block); });
}

int pool_op(kvweld_engine* e, int32_t op, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        kvweld::KvPool& pool = *e->pool_kv;
        if (op == KVWELD_POOL_GROW) return pool.grow(kvweld::abi::grown_blocks(pool.n_blocks()));
        if (op == KVWELD_POOL_RESET) {
            for (auto& [id, s] : e->seqs) s.release_all(pool);
            return pool.reset();
        }
        require(op == KVWELD_POOL_COMPACT, "pool_op: op ", op,
                ": expected KVWELD_POOL_COMPACT, KVWELD_POOL_GROW or KVWELD_POOL_RESET");
        std::vector<kvweld::PagedSequence*> live;
        for (auto& [id, s] : e->seqs) live.push_back(&s);
        pool.compact(live);
    });
}

// One plan serves every sequence: each open sequence's plan is the session's.
int plan_serial(const kvweld_engine* e, int32_t seq, uint64_t* out, char* err, size_t err_len) {
    return guarded(e, err, err_len, [&] {
        seq_of(e, seq);
        *out = e->session.plan_serial().get();
    });
}

// Left out: per-sequence storage identity (the pool's is in pool_info), a
// layer swap (one pool holds every layer), a twin (no setting turns its plan
// reuse off), context shift and state (a block table's row is its
// position: a shift would move rows across blocks), embeddings, backend
// samplers, an abort callback and keep_seq (the dense design has each),
// and live_settings_of (its live settings are the plugin's).
const kvweld_engine_api kApi = {
    .abi_version = KVWELD_ENGINE_ABI_VERSION,
    .name = "kvweld-paged",
    .model_format = "gguf",
    .capabilities = KVWELD_CAP_COPY_SEQ | KVWELD_CAP_PLAN_COUNTERS | KVWELD_CAP_RELOAD | KVWELD_CAP_READ_KV |
                    KVWELD_CAP_BLOCKS | KVWELD_CAP_POOL_OPS | KVWELD_CAP_PLAN_SERIAL | KVWELD_CAP_LORA |
                    KVWELD_CAP_CVEC | KVWELD_CAP_OUTPUTS | KVWELD_CAP_MOE | KVWELD_CAP_WARMUP,
    .fault_names = nullptr,  // its settings (ABI 15)
    .create = nullptr,  // create_v16: a host before ABI 16 refuses this table
    .destroy = destroy,
    .vocab = vocab,
    .open_seq = open_seq,
    .close_seq = close_seq,
    .decode = decode,
    .truncate = truncate,
    .clear_seq = clear_seq,
    .clear_all = clear_all,
    .copy_seq = copy_seq,
    .counters = counters,
    .reload = reload,
    .storage = nullptr,
    .read_kv = read_kv,
    .swap_layer = nullptr,
    .pool_info = pool_info,
    .block_table = block_table,
    .block_refcount = block_refcount,
    .pool_op = pool_op,
    .plan_serial = plan_serial,
    .set_loras = set_loras,
    .set_cvec = set_cvec,
    .decode_outputs = decode_outputs,
    .set_warmup = set_warmup,
    .no_reuse_param = nullptr,
    .twin_tolerance = nullptr,
    .shift = nullptr,
    .state_save = nullptr,
    .state_load = nullptr,
    .build = KVWELD_BUILD,
    .live_settings = nullptr,  // its settings (ABI 15)
    .set_live = set_live,
    .read_embeddings = nullptr,
    .set_sampler = nullptr,
    .sampled = nullptr,
    .set_abort = nullptr,
    .seq_length = nullptr,
    .live_settings_of = nullptr,
    .struct_size = sizeof(kvweld_engine_api),
    .keep_seq = nullptr,
    .rule_create = nullptr,  // its rule is kvweld's own (targets/registry.cpp)
    .rule_destroy = nullptr,
    .rule_on_call = nullptr,
    .rule_on_decode = nullptr,
    .rule_why = nullptr,
    .settings = settings().data(),
    .n_settings = settings().size(),
    .create_v16 = create,
    .takes_live = nullptr,  // every value of its live settings
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) { return &kApi; }
