// kvweld's dense engine (targets/kvweld/dense_engine.hpp) behind the plugin
// ABI (include/kvweld/engine_abi.h): the same class the simulator runs in
// process, over the model loaded from the GGUF file the harness wrote. It exists so that the ABI is exercised by an engine with fault
// switches, and so that the in-process engine and its plugin can be run
// side by side on the same seeds.
#include "targets/kvweld/dense_engine.hpp"
#include "targets/kvweld/kvweld_plugin_base.hpp"
#include "engine/gguf.hpp"
#include "util/error.hpp"

#include <map>
#include <memory>
#include <string>

struct kvweld_engine {
    std::unique_ptr<kvweld::targets::DenseEngine> engine;
    kvweld::abi::LoraFiles adapters;
};

namespace {

using kvweld::abi::guarded;
using kvweld::require;

// The engine's fault switches this ABI can reach (none in a build without
// KVWELD_FAULTS), each with the classes it may show as: "name:a|b,...".
// Left out: the paged design's, and spec_reject_off_by_one, a fault of the
// scheduler the simulator plays in process. build_counted_as_kept acts
// here: a reload keeps each slot's session, whose next key check is
// stale(model_instance), and the plan identity (plan_serial) shows the
// uncounted build.
const std::string& fault_list() {
    static const std::string names = kvweld::abi::fault_names_for([](const kvweld::FaultInfo& f) {
        return f.design != kvweld::FaultDesign::paged && !f.in_process_only;
    });
    return names;
}

// Its settings as data (ABI 15): the host checks a run's params against them.
const kvweld::abi::SettingsTable& settings() {
    static const kvweld::abi::SettingsTable table = [] {
        kvweld::abi::SettingsTable t;
        t.add(KVWELD_SETTING_PARAM, "policy", {"rebind", "rebuild"},
              "a slot's next request: its held plan rebound to the new storage, or rebuilt");
        t.add(KVWELD_SETTING_PARAM, "backend", {"cpu", "cuda"}, "where the plan runs");
        t.add(KVWELD_SETTING_PARAM, "reuse", {"0", "1"}, "0: a plan built for every call (the twin)");
        t.add_list(KVWELD_SETTING_LIVE, kvweld::abi::kThreadsEmbeddingsCausal);
        t.add_list(KVWELD_SETTING_FAULT, fault_list().c_str());
        return t;
    }();
    return table;
}

int create(const kvweld_engine_options* o, kvweld_engine** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(o && o->model_path, "no options or model path");
        const kvweld::abi::Given given = kvweld::abi::read_given(o);
        kvweld::FaultSet faults;
        for (const std::string& name : given.faults) {
            const auto f = kvweld::fault_from_name(name);
            require(f && kvweld::abi::lists_fault(fault_list().c_str(), name), "unknown fault '", name,
                    "': this engine's faults are ", fault_list().empty() ? "(none in this build)" : fault_list());
            faults.add(*f);
        }
        const kvweld::Model model = kvweld::load_gguf(o->model_path);
        const kvweld::targets::EngineSetup setup{given.params_text(), o->n_seq_max, o->n_ctx, o->threads};
        *out = new kvweld_engine{std::make_unique<kvweld::targets::DenseEngine>(model, setup, faults), {}};
    });
}

void destroy(kvweld_engine* e) { delete e; }

int32_t vocab(const kvweld_engine* e) { return e->engine->vocab(); }

int open_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->open(seq); });
}

int close_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->close(seq); });
}

// A decode's body: as guarded, but a call the abort callback stopped
// returns KVWELD_ABORTED (ABI 12).
template <class Fn>
int guarded_decode(char* err, size_t err_len, Fn&& fn) {
    bool aborted = false;
    const int rc = guarded(err, err_len, [&] {
        try {
            fn();
        } catch (const kvweld::targets::Aborted&) {
            aborted = true;
            throw;
        }
    });
    return rc != 0 && aborted ? KVWELD_ABORTED : rc;
}

int decode(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, int32_t n, float* logits, char* err,
           size_t err_len) {
    return guarded_decode(err, err_len, [&] {
        require(n >= 0, "decode of ", n, " pairs");
        const std::vector<float> rows =
            e->engine->decode({seqs, std::size_t(n)}, {tokens, std::size_t(n)});
        std::copy(rows.begin(), rows.end(), logits);
    });
}

int decode_outputs(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, const uint8_t* outputs, int32_t n,
                   float* logits, char* err, size_t err_len) {
    return guarded_decode(err, err_len, [&] {
        require(n >= 0 && outputs, "decode_outputs of ", n, " pairs", outputs ? "" : " without output flags");
        const std::vector<float> rows = e->engine->decode({seqs, std::size_t(n)}, {tokens, std::size_t(n)},
                                                          {outputs, std::size_t(n)});
        std::copy(rows.begin(), rows.end(), logits);
    });
}

int truncate(kvweld_engine* e, int32_t seq, int32_t n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->truncate(seq, n); });
}

int shift(kvweld_engine* e, int32_t seq, int32_t p0, int32_t p1, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->shift(seq, p0, p1); });
}

int state_save(kvweld_engine* e, int32_t seq, uint8_t* out, size_t cap, size_t* n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { kvweld::abi::write_sized(e->engine->state_save(seq), out, cap, n); });
}

int state_load(kvweld_engine* e, int32_t seq, const uint8_t* data, size_t n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(data || n == 0, "state_load: no data");
        e->engine->state_load(seq, {data, n});
    });
}

int clear_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->clear(seq); });
}

int clear_all(kvweld_engine* e, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->clear_all(); });
}

int copy_seq(kvweld_engine* e, int32_t src, int32_t dst, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->copy(src, dst); });
}

// The file is read and checked in full before the engine changes.
int reload(kvweld_engine* e, const char* path, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(path != nullptr, "reload: no model path");
        e->engine->reload(kvweld::load_gguf(path));
    });
}

int storage(const kvweld_engine* e, int32_t seq, int32_t which, uint64_t* out, int32_t n_layers, char* err,
            size_t err_len) {
    return guarded(err, err_len, [&] {
        const std::vector<uint64_t> serials = e->engine->storage(seq, which, n_layers);
        std::copy(serials.begin(), serials.end(), out);
    });
}

int read_kv(const kvweld_engine* e, int32_t seq, int32_t layer, int32_t pos, float* k, float* v, int32_t kv_dim,
            char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(kv_dim >= 0, "read_kv: kv_dim ", kv_dim);
        e->engine->read_kv(seq, layer, pos, {k, std::size_t(kv_dim)}, {v, std::size_t(kv_dim)});
    });
}

int swap_layer(kvweld_engine* e, int32_t seq, int32_t layer, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->swap_layer(seq, layer); });
}

int counters(const kvweld_engine* e, kvweld_engine_counters* out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { *out = *e->engine->counters(); });
}

int plan_serial(const kvweld_engine* e, int32_t seq, uint64_t* out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { *out = e->engine->plan_serial(seq); });
}

// Every file is read and checked before the engine changes.
int set_loras(kvweld_engine* e, const char* const* paths, const float* scales, int32_t n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        e->engine->set_loras(kvweld::abi::lora_uses(e->adapters, paths, scales, n, e->engine->config()));
    });
}

int set_cvec(kvweld_engine* e, const float* data, size_t len, int32_t n_embd, int32_t il_start, int32_t il_end,
             char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto cv = kvweld::abi::cvec_of(data, len, n_embd, il_start, il_end, e->engine->config());
        e->engine->set_cvec(cv ? &*cv : nullptr);
    });
}

int set_warmup(kvweld_engine* e, int32_t on, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(on == 0 || on == 1, "set_warmup: on = ", on, ": must be 0 or 1");
        e->engine->set_warmup(on == 1);
    });
}

int set_live(kvweld_engine* e, const char* key, const char* value, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->set_live(key ? key : "", value ? value : ""); });
}

int read_embeddings(const kvweld_engine* e, int32_t row, float* out, int32_t n_embd, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(out != nullptr, "read_embeddings: no output buffer");
        const std::vector<float> hidden = e->engine->embeddings(row, n_embd);
        std::copy(hidden.begin(), hidden.end(), out);
    });
}

int set_sampler(kvweld_engine* e, int32_t seq, const kvweld_sampler* s, int32_t in_place, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const kvweld::SamplerSpec spec{s ? s->top_k : 0, s ? s->seed : 0};
        e->engine->set_sampler(seq, s ? &spec : nullptr, in_place != 0);
    });
}

int sampled(const kvweld_engine* e, int32_t row, int32_t* token, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(token != nullptr, "sampled: no output");
        *token = e->engine->sampled(row);
    });
}

int set_abort(kvweld_engine* e, int32_t after, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->set_abort(after); });
}

// The CUDA backend attends causally only: its engine lists no causal_attn.
int32_t takes_live(const kvweld_engine* e, const char* key, const char* value) {
    return kvweld::abi::lists_live(e->engine->live_settings().c_str(), key, value) ? 1 : 0;
}

int keep_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] { e->engine->keep(seq); });
}

int seq_length(const kvweld_engine* e, int32_t seq, int32_t* n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(n != nullptr, "seq_length: no output");
        *n = e->engine->seq_length(seq);
    });
}

// Left out: a pool (dense KV; the paged engine is kvweld_paged_plugin.cpp)
// and twin_tolerance (bit for bit with its twin in every state).
const kvweld_engine_api kApi = {
    .abi_version = KVWELD_ENGINE_ABI_VERSION,
    .name = "kvweld",
    .model_format = "gguf",
    .capabilities = kvweld::targets::kDenseCapabilities,
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
    .storage = storage,
    .read_kv = read_kv,
    .swap_layer = swap_layer,
    .pool_info = nullptr,
    .block_table = nullptr,
    .block_refcount = nullptr,
    .pool_op = nullptr,
    .plan_serial = plan_serial,
    .set_loras = set_loras,
    .set_cvec = set_cvec,
    .decode_outputs = decode_outputs,
    .set_warmup = set_warmup,
    .no_reuse_param = kvweld::targets::kDenseNoReuse,
    .twin_tolerance = nullptr,
    .shift = shift,
    .state_save = state_save,
    .state_load = state_load,
    .build = KVWELD_BUILD,
    .live_settings = nullptr,  // its settings (ABI 15)
    .set_live = set_live,
    .read_embeddings = read_embeddings,
    .set_sampler = set_sampler,
    .sampled = sampled,
    .set_abort = set_abort,
    .seq_length = seq_length,
    .live_settings_of = nullptr,  // takes_live (ABI 16)
    .struct_size = sizeof(kvweld_engine_api),
    .keep_seq = keep_seq,
    .rule_create = nullptr,  // its rule is kvweld's own (targets/registry.cpp)
    .rule_destroy = nullptr,
    .rule_on_call = nullptr,
    .rule_on_decode = nullptr,
    .rule_why = nullptr,
    .settings = settings().data(),
    .n_settings = std::int32_t(settings().size()),
    .create_v16 = create,
    .takes_live = takes_live,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) { return &kApi; }
