// llama.cpp behind kvweld's plugin ABI (include/kvweld/engine_abi.h).
// Sequences are llama.cpp sequence ids in one context (F32 weights from the
// harness's GGUF file, by default F32 KV and flash attention off: the settings below); a decode is one
// llama_decode of the whole batch; truncate, clear and copy are llama.cpp's
// memory operations. The counters are llama.cpp's own graph reuse count
// (llama_perf_context().n_reused, per graph computed) and the decode calls
// beyond it; llama.cpp may split one batch into several graphs, so `builds`
// is a lower bound: the accounting rule (targets/llamacpp/llamacpp_rule.cpp)
// checks `reused` only.
//
// LoRA adapters and a control vector (ABI 5) go to llama_set_adapters_lora
// and llama_set_adapter_cvec (or their older forms: llama_compat.hpp, which
// hides every difference between releases 0.3.15 .. 0.3.36); the plugin keeps what it was given and sets it
// again on the context a reload makes (adapters are loaded per model).
// Warmup (ABI 6) goes to llama_set_warmup, deprecated in llama.h but the
// only way to reach the routing it switches; it too is set again on reload.
// A context shift (ABI 7) is llama_memory_seq_rm then llama_memory_seq_add
// with a negative delta, refused where llama_memory_can_shift says no; no
// seq_div (the ABI has no capability for it). A state (ABI 7) is a header of
// the plugin's ("KVLS", the positions, a digest of the model file: another
// model's state is refused before llama.cpp reads it) and
// llama_state_seq_get_data's bytes; llama.cpp empties a sequence whose load
// it refuses, so the plugin saves the sequence first and puts it back.
//
// Params (given as options.given, ABI 16): kv_unified=0|1 (default 0: each sequence has
// n_ctx cells of its own), graph_reuse=0|1 (default 1; 0 sets llama.cpp's
// LLAMA_GRAPH_REUSE_DISABLE for this context), kv_type=f32|f16|q8_0|q4_0
// (the KV cache's type, default f32; quantized needs flash_attn=1), flash_attn=0|1 (default 0), rope_scale=S
// (llama.cpp's rope_freq_scale: linear RoPE scaling, default 1) and
// n_ubatch=N (1..512, default 512: the physical batch; a call of more
// tokens runs as several ubatches, each its own graph). kvweld's reference
// models none of kv_type, flash_attn and rope_scale: under them the twin is
// the data oracle (targets/registry.hpp). Two more are never drawn:
// kv_cells=N (with kv_unified=1: the cells all sequences share, rounded up
// as llama.cpp pads n_ctx, instead of n_ctx for each), so the cache can
// fill: a call that finds no slot (llama_decode returns 1) is refused as
// "the KV cache is full", and llama.h says the memory is then as before the
// call; and pooling=none|mean|last (llama_context_params::pooling_type,
// default none), under which read_embeddings gives the row's sequence's
// pooled embedding (llama_get_embeddings_seq) instead of the row's own.
// Another memory (llama_arch_models.hpp): arch=llama (the file's own
// model, default), granite_swa (a sliding-window KV cache), mamba
// (recurrent state), lfm2 (hybrid) or lfm2_swa (hybrid with a sliding
// window), each made with the file's shape and weights drawn from its
// digest (b11434 and later: llama_model_init_from_user); swa_window=N
// (1..64, default 8), swa_full=0|1 (llama_context_params::swa_full) and
// n_rs_seq=N (0..8: a recurrent memory's snapshots for rollback).
//
// Fault switches (given as options.given) make this adapter use llama.cpp wrongly,
// so the kill matrix shows the oracles catch a harness-side mistake on a
// real engine; see kFaults.
#include "targets/abi_guard.hpp"
#include "engine/sampling.hpp"
#include "targets/abi_lists.hpp"
#include "targets/llamacpp/llama_arch_models.hpp"
#include "targets/llamacpp/llama_compat.hpp"
#include "targets/llamacpp/llamacpp_memory_steps.hpp"
#include "targets/llamacpp/llamacpp_params.hpp"
#include "kvweld/engine_abi.h"

#include <llama.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <stdexcept>
#include <string>
#include <vector>

namespace llama_steps = kvweld::targets::llama_steps;
using kvweld::llamacpp::ArchModel;
using kvweld::llamacpp::MemoryKind;

namespace {

// The adapter's fault switches: each one a mistake a harness could make.
enum Fault : unsigned {
    truncate_one_short = 1u << 0,     // truncate(n) keeps n+1 positions
    decode_wrong_seq = 1u << 1,       // a batch's first pair goes to the next open sequence
    skip_clear = 1u << 2,             // clear_seq forgets the positions but leaves the KV
    stale_logits = 1u << 3,           // a batch shaped like the last one gets its last row back
    reload_drops_reuse = 1u << 4,     // reload makes the new context with graph reuse off, settings say on
    overcount_reused = 1u << 5,       // counters report one more reused graph per decode call
    reload_resets_counters = 1u << 6, // reload starts the counters from zero with the new context
    scales_kept_with_reuse = 1u << 7, // with graph reuse on, new scales for the same adapters are not passed on
    abort_counts_fed = 1u << 8,       // after an aborted decode, every token fed is counted as held (none read back)
    placement_keyed = 1u << 9,        // unified KV past 256 tokens placed: a graph rebuilt at each 32 more
};
// Each with the classes its failures may show as (ABI 4). The two that
// put a token at a position the harness did not ask for are stale decodes,
// or engine errors when that pushes a sequence past its context (the
// adapter refuses "sequence N is full" before any row is read: seen on
// seeds 7 and 37 of the kill matrix). skip_clear's is engine_error: llama.cpp itself refuses the re-prefill, since a batch's
// first position for a sequence must follow the last one its memory holds
// (llama_batch_allocr::init in src/llama-batch.cpp, 0.3.36), so the stale
// KV is never read. The two accounting faults leave every row right:
// only the accounting oracle can see them.
constexpr struct {
    const char* name;
    Fault fault;
    const char* classes;
} kFaults[] = {{"truncate_one_short", truncate_one_short, "stale_decode|engine_error"},
               // Or a spurious invalidation: the moved pair changes the
               // ubatch llama.cpp splits, so a graph the rule requires
               // reused (same shape as the caller sent) is built (seed 28
               // of the kill matrix, in a steady phase).
               {"decode_wrong_seq", decode_wrong_seq, "stale_decode|engine_error|spurious_invalidation"},
               {"skip_clear", skip_clear, "engine_error"},
               {"stale_logits", stale_logits, "stale_decode"},
               {"reload_drops_reuse", reload_drops_reuse, "spurious_invalidation"},
               {"overcount_reused", overcount_reused, "missed_invalidation"},
               {"reload_resets_counters", reload_resets_counters, "engine_error"},
               // As an engine whose reused graph kept the scales it baked:
               // only where graph reuse is on, so the twin (reuse off) has
               // the new scales and its rows differ, whatever the KV type.
               {"scales_kept_with_reuse", scales_kept_with_reuse, "stale_decode"},
               // The next call feeds a sequence past what llama.cpp's
               // memory holds: refused where the memory holds some of it
               // (positions must follow its last: llama_batch_allocr::init,
               // 0.3.36), taken where it holds none (no last position to
               // follow), the rows then at the wrong positions.
               {"abort_counts_fed", abort_counts_fed, "stale_decode|engine_error"},
               // Over-keying (a spurious invalidation, every row right): as
               // an engine that keys its graph on how many tokens its
               // unified cache has placed since it was emptied, in steps of
               // 32, not on the window (n_kv, padded to 256): it rebuilds
               // past 256 tokens placed, where a rule that bounds the
               // window by the tokens placed allows either, and the
               // modelled cells (llamacpp_kv_cells.hpp) know the window and
               // require the reuse. The rebuild is the control vector set
               // again as it is, which makes the pinned build reserve (on
               // b11434+fixes it does not: the fault does nothing there).
               {"placement_keyed", placement_keyed, "spurious_invalidation"}};

}  // namespace

struct kvweld_engine {
    llama_model* model = nullptr;
    llama_context* ctx = nullptr;
    int n_ctx = 0, n_seq_max = 0, vocab = 0;
    unsigned faults = 0;
    std::vector<int> len;    // per sequence: positions held, -1 when closed
    std::uint64_t calls = 0; // llama_decode calls
    std::uint64_t calls_reusing = 0;  // of them, those in which llama.cpp reused a graph
    std::uint64_t reused_before = 0;  // graph reuses counted by contexts a reload replaced
    llama_context_params cparams{};   // to create the context again on reload
    bool graph_reuse = true;
    std::vector<int> last_seqs;     // stale_logits: the previous batch's sequences
    std::vector<float> last_row;    // and its last row of logits
    // The adapters given (a path names one adapter for the engine's life),
    // each loaded once per model, and the control vector (empty: none).
    std::vector<std::string> lora_paths;
    std::vector<float> lora_scales;
    std::map<std::string, llama_adapter_lora*> loras;  // freed before the model (free_loras)
    std::vector<float> cvec;
    int32_t cvec_start = -1, cvec_end = -1;
    bool warmup = false;
    int n_threads = 0;  // the live setting given (ABI 9; 0: the option's)
    bool embeddings = false;            // the live setting (ABI 10)
    bool causal = true;                 // the live setting causal_attn
    bool pooled = false;                // pooling=mean|last: read_embeddings gives the sequence's
    std::vector<int32_t> output_rows;   // the last call's output pairs, as batch indices
    std::vector<int32_t> output_seqs;   // and their sequences
    // ABI 11: each sequence's backend sampler chain (owned here; the
    // context holds the pointer, so the chains go after it), and the
    // tokens sampled for the last call's output rows (-1: no chain).
    struct Chain {
        llama_sampler* chain;
        kvweld_sampler spec;  // what it was made or last changed to (a reload makes it anew)
    };
    std::map<int32_t, Chain> chains;
    std::vector<int32_t> sampled;
    // ABI 12: the abort callback (llama_set_abort_callback, asked by the CPU
    // backend after each graph node): armed for one call, yes from the
    // `abort_after`-th question on.
    int32_t abort_after = -1;
    int32_t abort_asked = 0;
    int placed = 0;  // placement_keyed: tokens placed since the cache was last emptied whole
    std::uint64_t model_digest = 0;  // of the model file's bytes: what a saved state names
    // arch=NAME: the model the file's shape and digest make (llama_arch_models.hpp);
    // nullptr: the file's own llama model.
    const ArchModel* arch = nullptr;
    std::uint32_t window = 8;  // swa_window: the sliding window of an arch that has one
    ~kvweld_engine();
};

// A model's adapters, freed after every context that used them and before
// the model. From 0.3.20 llama.cpp frees them with the model (llama_model
// keeps a set, src/llama-model.h:562); 0.3.15 and 0.3.16 do not, though
// their llama.h says so (line 561: their llama_model has no such set, and
// ASan saw every adapter leak). llama_adapter_lora_free also takes an
// adapter out of its model's set where there is one, so one call serves
// every release.
static void free_loras(std::map<std::string, llama_adapter_lora*>& loras) {
    for (auto& [path, adapter] : loras) llama_adapter_lora_free(adapter);
    loras.clear();
}

kvweld_engine::~kvweld_engine() {
    if (ctx) llama_free(ctx);
    for (auto& [seq, c] : chains) llama_sampler_free(c.chain);
    free_loras(loras);
    if (model) llama_model_free(model);
}

namespace {

template <class... Parts>
void require(bool cond, const Parts&... parts) {
    if (cond) return;
    std::string msg;
    ((msg += [&] {
         if constexpr (std::is_arithmetic_v<Parts>) return std::to_string(parts);
         else return std::string(parts);
     }()),
     ...);
    throw std::runtime_error(msg);
}

using kvweld::abi::guarded;

// llama.cpp logs why it refuses an adapter (and returns only NULL): the
// plugin keeps this thread's error lines while it loads one, so its own
// error can say why.
thread_local std::string* error_log = nullptr;

void keep_errors(ggml_log_level level, const char* text, void*) {
    if (error_log && level == GGML_LOG_LEVEL_ERROR && text) *error_log += text;
}


// What keep_errors gathered, without its trailing newlines.
void trim_log(std::string& why) {
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
}

const char* fault_names() {
    static const std::string names = [] {
        std::string out;
        for (const auto& f : kFaults) {
            if (!out.empty()) out += ',';
            out.append(f.name).append(":").append(f.classes);
        }
        return out;
    }();
    return names.c_str();
}

// Its settings as data (ABI 15): the params (their values checked here,
// parse_params and the readers after it), the live settings and the faults.
const kvweld::abi::SettingsTable& settings() {
    static const kvweld::abi::SettingsTable table = [] {
        kvweld::abi::SettingsTable t;
        for (const std::string& key : kvweld::targets::kLlamacppSettings) t.add(KVWELD_SETTING_PARAM, key, {});
        t.add_list(KVWELD_SETTING_LIVE, kvweld::abi::kThreadsEmbeddingsCausal);
        t.add_list(KVWELD_SETTING_FAULT, fault_names());
        return t;
    }();
    return table;
}

int& len_of(kvweld_engine* e, int32_t seq) {
    require(seq >= 0 && seq < e->n_seq_max, "sequence ", seq, " out of range 0..", e->n_seq_max - 1);
    require(e->len[std::size_t(seq)] >= 0, "sequence ", seq, " is not open");
    return e->len[std::size_t(seq)];
}

llama_memory_t memory(kvweld_engine* e) { return llama_get_memory(e->ctx); }

// An engine call's llama.h memory calls, from the one table the reproducer
// writer prints too (llamacpp_memory_steps.hpp).
void run_steps(kvweld_engine* e, const std::vector<llama_steps::Step>& steps) {
    using llama_steps::Fn;
    for (const llama_steps::Step& s : steps) switch (s.fn) {
            case Fn::seq_rm: {
                const bool removed = llama_memory_seq_rm(memory(e), s.seq, s.p0, s.p1);
                require(removed || !s.checked, "llama_memory_seq_rm refused [", s.p0, ", ", s.p1, ")");
                break;
            }
            case Fn::seq_cp: llama_memory_seq_cp(memory(e), s.seq, s.dst, s.p0, s.p1); break;
            case Fn::seq_add: llama_memory_seq_add(memory(e), s.seq, s.p0, s.p1, s.delta); break;
            case Fn::clear: llama_memory_clear(memory(e), true); break;
            case Fn::seq_keep: llama_memory_seq_keep(memory(e), s.seq); break;
        }
}

// placement_keyed: a call of n tokens in a unified cache past 256 placed
// since it was emptied; at each step of 32 more the control vector is set
// again as it is, so the call's first graph builds.
void placement_rebuild(kvweld_engine* e, int n) {
    const int before = e->placed;
    e->placed += n;
    if (e->cparams.kv_unified && before > 256 && before / 32 != e->placed / 32)
        kvweld::llama_compat::set_cvec(e->ctx, e->cvec.empty() ? nullptr : e->cvec.data(), e->cvec.size(),
                                       llama_model_n_embd(e->model), e->cvec_start, e->cvec_end);
}

// decode_wrong_seq: the open sequence after `seq` (itself when it is alone).
int32_t next_open(const kvweld_engine* e, int32_t seq) {
    for (int step = 1; step < e->n_seq_max; ++step) {
        const int32_t other = (seq + step) % e->n_seq_max;
        if (e->len[std::size_t(other)] >= 0) return other;
    }
    return seq;
}

unsigned parse_faults(const std::vector<std::string>& names) {
    unsigned out = 0;
    for (const std::string& name : names) {
        unsigned bit = 0;
        for (const auto& f : kFaults) bit |= name == f.name ? unsigned(f.fault) : 0u;
        require(bit != 0, "unknown fault '", name, "': this adapter's faults (with their classes) are ", fault_names());
        out |= bit;
    }
    return out;
}

// llama.cpp reads LLAMA_GRAPH_REUSE_DISABLE, and only it, when a context
// is created. setenv() while other threads call getenv() (llama.cpp and
// ggml do, while decoding) can crash them, as ASan showed: so the plugin
// puts its own entry into the environment once, when it is loaded (on the
// thread that loads it, before engines run), and later only flips its
// value character in place, under a lock that serializes context creation.
// The plugin owns the variable: its graph_reuse setting decides. Several
// copies of the plugin in one process (one per llama.cpp release: kvweld
// diff) share the one entry: the first to load puts its buffer in, every
// copy flips the value getenv finds (flipping its own buffer after another
// copy's putenv would change nothing llama.cpp reads), and the host
// serializes every plugin's create and reload (targets/plugin_host.cpp),
// which one copy's lock cannot.
char reuse_disable_env[] = "LLAMA_GRAPH_REUSE_DISABLE=0";
std::mutex create_lock;

// The entry's one-character value, if the entry is one this plugin can flip.
char* reuse_env_value() {
    char* value = std::getenv("LLAMA_GRAPH_REUSE_DISABLE");
    return value && (value[0] == '0' || value[0] == '1') && value[1] == '\0' ? value : nullptr;
}

void own_reuse_env() {
    static const bool done = (reuse_env_value() || putenv(reuse_disable_env) == 0, true);
    (void)done;
}

bool abort_check(void* data) {
    auto* e = static_cast<kvweld_engine*>(data);
    return e->abort_after >= 0 && e->abort_asked++ >= e->abort_after;
}

llama_context* create_context(llama_model* model, const llama_context_params& cp, bool graph_reuse) {
    const std::lock_guard<std::mutex> lock(create_lock);
    char* value = reuse_env_value();
    require(value != nullptr, "LLAMA_GRAPH_REUSE_DISABLE is not a 0 or 1 this plugin set (changed after it loaded?)");
    *value = graph_reuse ? '0' : '1';
    llama_context* ctx = llama_init_from_model(model, cp);
    *value = '0';
    return ctx;
}

// FNV-1a over a model file's bytes: the model a saved state belongs to.
std::uint64_t file_digest(const char* path) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path, "rb"), std::fclose);
    require(f != nullptr, "cannot read ", path);
    std::uint64_t h = 0xcbf29ce484222325ULL;
    std::vector<unsigned char> buf(1 << 16);
    for (std::size_t got; (got = std::fread(buf.data(), 1, buf.size(), f.get())) > 0;)
        for (std::size_t i = 0; i < got; ++i) h = (h ^ buf[i]) * 0x100000001b3ULL;
    return h;
}

// "llama, granite_swa, ..." for a refusal of arch=.
std::string arch_names() {
    std::string out;
    for (const ArchModel& a : kvweld::llamacpp::kArchModels) out += std::string(out.empty() ? "" : ", ") + a.name;
    return out;
}

// The model of `path` (kvweld's llama GGUF), or with arch=NAME the model
// of that architecture with the file's shape (vocabulary, width, depth,
// heads), its weights drawn from the file's digest: a reload of other
// weights gives other weights, and a state names the file either way.
llama_model* load_model(const char* path, const ArchModel* arch, std::uint32_t window, std::uint64_t digest) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* file = llama_model_load_from_file(path, mp);
    require(file != nullptr, "llama.cpp cannot load ", path);
    if (!arch || arch->memory == MemoryKind::kv) return file;
    const kvweld::llamacpp::ArchShape shape = kvweld::llamacpp::arch_shape_of(file, window);
    llama_model_free(file);
    std::string why;  // llama.cpp logs why it refuses the metadata
    error_log = &why;
    llama_model* model = kvweld::llamacpp::arch_model(*arch, std::uint32_t(digest ^ (digest >> 32)), shape);
    error_log = nullptr;
    trim_log(why);
    require(kvweld::llamacpp::kHasInitFromUser, "setting arch=", arch->name,
            ": this llama.cpp has no llama_model_init_from_user (b11434 and llama-cpp-python 0.3.36 have it, 0.3.16 does not)");
    require(model != nullptr, "setting arch=", arch->name, ": llama.cpp made no model of ", shape.layers, " layers, width ",
            shape.embd, ", ", shape.heads, " heads", why.empty() ? "" : ": ", why);
    return model;
}

int create(const kvweld_engine_options* o, kvweld_engine** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        static const bool init = [] {
            llama_log_set(keep_errors, nullptr);
            llama_backend_init();
            return true;
        }();
        (void)init;
        require(o && o->model_path, "no options or model path");
        require(o->n_ctx >= 1 && o->n_seq_max >= 1 && o->n_seq_max <= 256, "n_ctx ", o->n_ctx, ", n_seq_max ",
                o->n_seq_max, ": out of range");
        auto e = std::make_unique<kvweld_engine>();
        const kvweld::abi::Given given = kvweld::abi::read_given(o);
        e->faults = parse_faults(given.faults);
        const auto params =
            kvweld::abi::parse_params(given.params_text().c_str(), kvweld::targets::kLlamacppSettings);
        // The KV cache's type; a quantized one (a server's -ctk/-ctv q8_0)
        // needs flash attention for its V (llama.cpp refuses it otherwise),
        // and with a head size a multiple of 64 llama.cpp rotates it
        // (Hadamard, llama_kv_cache's attn_rot_k/v).
        constexpr std::pair<const char*, ggml_type> kKvTypes[] = {
            {"f32", GGML_TYPE_F32}, {"f16", GGML_TYPE_F16}, {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}};
        const std::string kv_type = params.count("kv_type") ? params.at("kv_type") : "f32";
        const auto type = std::find_if(std::begin(kKvTypes), std::end(kKvTypes),
                                       [&](const auto& t) { return kv_type == t.first; });
        require(type != std::end(kKvTypes), "setting kv_type=", kv_type, ": must be f32, f16, q8_0 or q4_0");
        require(!ggml_is_quantized(type->second) || kvweld::abi::flag_param(params, "flash_attn", false),
                "setting kv_type=", kv_type, ": a quantized KV cache needs flash_attn=1 (llama.cpp quantizes V only "
                "under flash attention)");
        const std::string arch = params.count("arch") ? params.at("arch") : "llama";
        e->arch = kvweld::llamacpp::find_arch(arch);
        require(e->arch != nullptr, "setting arch=", arch, ": must be one of ", arch_names());
        e->window = std::uint32_t(kvweld::abi::int_param(params, "swa_window", 8, 1, 64));
        e->model_digest = file_digest(o->model_path);
        e->model = load_model(o->model_path, e->arch, e->window, e->model_digest);
        llama_context_params cp = llama_context_default_params();
        // Not unified (llama.cpp's default): each sequence has n_ctx cells of its own.
        cp.n_ctx = std::uint32_t(o->n_ctx) * std::uint32_t(o->n_seq_max);
        cp.n_seq_max = std::uint32_t(o->n_seq_max);
        cp.n_batch = cp.n_ubatch = 512;
        cp.n_threads = cp.n_threads_batch = std::max(1, o->threads);
        cp.type_k = cp.type_v = type->second;
        kvweld::llama_compat::set_flash_attn(cp, kvweld::abi::flag_param(params, "flash_attn", false));
        kvweld::llama_compat::sample_every_output(cp);
        cp.no_perf = false;
        cp.kv_unified = kvweld::abi::flag_param(params, "kv_unified", false);
        if (params.count("rope_scale")) {
            const std::string& text = params.at("rope_scale");
            char* end = nullptr;
            const float scale = std::strtof(text.c_str(), &end);
            require(end && *end == '\0' && scale > 0.0f && scale <= 16.0f, "setting rope_scale=", text,
                    ": must be a number in (0, 16]");
            cp.rope_freq_scale = scale;
        }
        if (params.count("n_ubatch")) {  // a server's physical batch below its logical one: a call in several ubatches
            const std::string& text = params.at("n_ubatch");
            char* end = nullptr;
            const long n = std::strtol(text.c_str(), &end, 10);
            require(end && end != text.c_str() && *end == '\0' && n >= 1 && n <= 512, "setting n_ubatch=", text,
                    ": must be a whole number in 1..512");
            cp.n_ubatch = std::uint32_t(n);
        }
        if (params.count("kv_cells")) {  // all sequences share these cells: the cache can fill
            require(cp.kv_unified, "setting kv_cells=", params.at("kv_cells"),
                    ": needs kv_unified=1 (one cache all sequences share)");
            cp.n_ctx = std::uint32_t(kvweld::abi::int_param(params, "kv_cells", 0, 1, int(cp.n_ctx)));
        }
        // A recurrent memory's snapshots for rollback (llama.cpp clamps it to
        // 0 for an architecture without them), and a sliding-window cache
        // of full size.
        const int rs_seq = kvweld::abi::int_param(params, "n_rs_seq", 0, 0, 8);
        require(rs_seq == 0 || kvweld::llama_compat::set_rs_seq(cp, std::uint32_t(rs_seq)), "setting n_rs_seq=", rs_seq,
                ": this llama.cpp has no llama_context_params::n_rs_seq");
        cp.swa_full = kvweld::abi::flag_param(params, "swa_full", false);
        // kvweld's Pooling names, in its order (abi_lists.hpp).
        constexpr enum llama_pooling_type kPoolings[] = {LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_MEAN,
                                                         LLAMA_POOLING_TYPE_LAST};
        // Not given: llama_context_default_params' LLAMA_POOLING_TYPE_UNSPECIFIED (the model's own: none here).
        if (params.count("pooling")) {
            const auto pooling = kvweld::abi::pooling_value(params.at("pooling"));
            cp.pooling_type = kPoolings[int(pooling)];
            e->pooled = pooling != kvweld::abi::Pooling::none;
        }
        e->cparams = cp;
        e->graph_reuse = kvweld::abi::flag_param(params, "graph_reuse", true);
        std::string why;  // llama.cpp logs why it refuses a context (0.3.16: n_seq_max above its 64)
        error_log = &why;
        e->ctx = create_context(e->model, cp, e->graph_reuse);
        error_log = nullptr;
        trim_log(why);
        require(e->ctx != nullptr, "llama.cpp: no context for n_ctx ", int(cp.n_ctx), " and n_seq_max ",
                int(cp.n_seq_max), why.empty() ? "" : ": ", why);
        llama_set_abort_callback(e->ctx, abort_check, e.get());
        e->n_ctx = o->n_ctx;
        e->n_seq_max = o->n_seq_max;
        e->vocab = llama_vocab_n_tokens(llama_model_get_vocab(e->model));
        e->len.assign(std::size_t(o->n_seq_max), -1);
        *out = e.release();
    });
}

void destroy(kvweld_engine* e) { delete e; }
int32_t vocab(const kvweld_engine* e) { return e->vocab; }

int open_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(seq >= 0 && seq < e->n_seq_max, "sequence ", seq, " out of range 0..", e->n_seq_max - 1);
        require(e->len[std::size_t(seq)] < 0, "sequence ", seq, " is already open");
        run_steps(e, llama_steps::empty(seq));
        e->len[std::size_t(seq)] = 0;
    });
}

int close_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        len_of(e, seq);
        run_steps(e, llama_steps::empty(seq));
        e->len[std::size_t(seq)] = -1;
    });
}

// Batch index i's logits into `out`, and its sampled token, accepted by
// its chain (every draw is kept: the ABI's contract). llama.cpp copies no
// logits back for a ubatch whose every output row is sampled
// (llama_context::decode, needs_raw_logits): such a row may then hold
// another call's logits, which the ABI allows.
void copy_row(kvweld_engine* e, int32_t seq, int32_t i, float* out) {
    const auto chain = e->chains.find(seq);
    const float* row = llama_get_logits_ith(e->ctx, i);
    require(row != nullptr || chain != e->chains.end(), "llama_get_logits_ith returned NULL for batch index ", i);
    if (row) std::memcpy(out, row, std::size_t(e->vocab) * sizeof(float));
    if (chain == e->chains.end()) return e->sampled.push_back(-1);
    const llama_token token = kvweld::llama_compat::sampled_token(e->ctx, i);
    e->sampled.push_back(token);
    if (token >= 0) llama_sampler_accept(chain->second.chain, token);
}

// The positions the open sequences hold, counted per sequence (a cell a
// copy shares counts for each): what a refusal for a full cache names.
long held_cells(const kvweld_engine* e) {
    long held = 0;
    for (int len : e->len) held += std::max(0, len);
    return held;
}

// outputs: NULL for every row (decode), else the pairs whose logits are
// wanted (decode_outputs): llama.cpp computes only those (batch.logits).
int decode_rows(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, const uint8_t* outputs, int32_t n,
                float* logits, char* err, size_t err_len) {
    bool aborted = false;
    const int rc = guarded(err, err_len, [&] {
        require(n >= 1 && n <= 512, "a batch of ", n, " pairs: must be 1..512");
        std::vector<int> next(e->len);
        llama_batch batch = llama_batch_init(n, 0, 1);
        struct Free {
            llama_batch& b;
            ~Free() { llama_batch_free(b); }
        } free_batch{batch};
        for (int32_t i = 0; i < n; ++i) {
            len_of(e, seqs[i]);
            require(tokens[i] >= 0 && tokens[i] < e->vocab, "pair ", i, ": token ", tokens[i], " out of range 0..",
                    e->vocab - 1);
        }
        for (int32_t i = 0; i < n; ++i) {
            const int32_t seq = i == 0 && (e->faults & decode_wrong_seq) ? next_open(e, seqs[0]) : seqs[i];
            int& pos = next[std::size_t(seq)];
            require(pos < e->n_ctx, "sequence ", seq, " is full: ", e->n_ctx, " positions");
            batch.token[i] = tokens[i];
            batch.pos[i] = pos++;
            batch.n_seq_id[i] = 1;
            batch.seq_id[i][0] = seq;
            batch.logits[i] = !outputs || outputs[i] ? 1 : 0;
        }
        batch.n_tokens = n;
        if (e->faults & placement_keyed) placement_rebuild(e, n);
        const int32_t reused_before = llama_perf_context(e->ctx).n_reused;
        std::string why;  // llama.cpp logs why it refuses a batch
        error_log = &why;
        const bool armed = e->abort_after >= 0;
        const int32_t rc = llama_decode(e->ctx, batch);
        const int32_t asked = std::exchange(e->abort_asked, 0);
        e->abort_after = -1;  // armed for this call only
        error_log = nullptr;
        trim_log(why);
        if (armed && rc == 2) {  // aborted: what llama.cpp kept is read back (llama.h)
            ++e->calls;
            e->output_rows.clear();
            e->output_seqs.clear();
            e->sampled.clear();
            for (int32_t i = 0; i < n; ++i)
                e->len[std::size_t(seqs[i])] = int(llama_memory_seq_pos_max(memory(e), seqs[i])) + 1;
            if (e->faults & abort_counts_fed) e->len = next;
            aborted = true;
            throw std::runtime_error("llama_decode returned 2 (aborted by the abort callback at its question " +
                                     std::to_string(asked) + ")");
        }
        // 1: no KV slot; llama.h: the memory is as before the call.
        require(rc != 1, "the KV cache is full: llama_decode returned 1 (no slot for the call's ", n, " tokens in ",
                llama_n_ctx(e->ctx), " cells, ", held_cells(e), " held)");
        require(rc == 0, "llama_decode returned ", rc, why.empty() ? "" : ": ", why);
        ++e->calls;
        e->calls_reusing += llama_perf_context(e->ctx).n_reused > reused_before ? 1 : 0;
        e->len = next;
        const auto v = std::size_t(e->vocab);
        std::size_t rows = 0;
        e->output_rows.clear();
        e->output_seqs.clear();
        e->sampled.clear();
        for (int32_t i = 0; i < n; ++i)
            if (batch.logits[i]) {
                copy_row(e, batch.seq_id[i][0], i, logits + v * rows++);
                e->output_rows.push_back(i);
                e->output_seqs.push_back(batch.seq_id[i][0]);
            }
        if ((e->faults & stale_logits) && rows > 0) {
            float* last = logits + (rows - 1) * v;
            const std::vector<int> shape(seqs, seqs + n);
            if (shape == e->last_seqs) std::copy(e->last_row.begin(), e->last_row.end(), last);
            e->last_seqs = shape;
            e->last_row.assign(last, last + v);
        }
    });
    return aborted ? KVWELD_ABORTED : rc;
}

int decode(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, int32_t n, float* logits, char* err,
           size_t err_len) {
    return decode_rows(e, seqs, tokens, nullptr, n, logits, err, err_len);
}

int decode_outputs(kvweld_engine* e, const int32_t* seqs, const int32_t* tokens, const uint8_t* outputs, int32_t n,
                   float* logits, char* err, size_t err_len) {
    if (!outputs) return decode_rows(e, seqs, tokens, nullptr, 0, logits, err, err_len);  // refused: no pairs
    return decode_rows(e, seqs, tokens, outputs, n, logits, err, err_len);
}

// A sliding window's cache (without swa_full) holds a sequence's positions
// from llama_memory_seq_pos_min on, the others masked and given away
// (llama.h: "all positions in the range [pos_min, pos_max] are guaranteed
// to be present"). A cut to `keep` leaves the next token at position keep,
// whose window needs every position from keep - n_swa + 1
// (llama_hparams::is_masked_swa): where they are gone, the plugin refuses
// the cut before making it, as llama-server re-processes the prompt there.
void window_kept_for(kvweld_engine* e, int32_t seq, int keep) {
    // (A hybrid one's recurrent part answers seq_pos_min with its last
    // position and refuses such cuts itself, past its snapshots.)
    if (keep == 0 || !e->arch || e->arch->memory != MemoryKind::sliding_window || e->cparams.swa_full) return;
    const int needed = std::max(0, keep - int(llama_model_n_swa(e->model)) + 1);
    const llama_pos held = llama_memory_seq_pos_min(memory(e), seq);
    require(held <= needed, "truncate_to(", keep, "): refused: the sliding window's cache holds this sequence from "
            "position ", held, " (llama_memory_seq_pos_min), and the next token's window needs position ", needed);
}

int truncate(kvweld_engine* e, int32_t seq, int32_t n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        int& len = len_of(e, seq);
        require(n >= 0 && n <= len, "truncate_to(", n, "): must be in 0..", len);
        const int keep = (e->faults & truncate_one_short) && n < len ? n + 1 : n;
        window_kept_for(e, seq, keep);
        run_steps(e, llama_steps::truncate(seq, keep));
        len = keep;
    });
}

int clear_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        int& len = len_of(e, seq);
        if (!(e->faults & skip_clear)) run_steps(e, llama_steps::empty(seq));
        len = 0;
    });
}

int clear_all(kvweld_engine* e, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        run_steps(e, llama_steps::clear_all());
        e->placed = 0;
        for (int& len : e->len)
            if (len > 0) len = 0;
    });
}

// Every other open sequence holds nothing now, by the plugin's account
// (llama.h: seq_keep "removes all tokens that do not belong to" seq).
int keep_seq(kvweld_engine* e, int32_t seq, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        len_of(e, seq);
        run_steps(e, llama_steps::keep(seq));
        for (int other = 0; other < e->n_seq_max; ++other)
            if (other != seq && e->len[std::size_t(other)] > 0) e->len[std::size_t(other)] = 0;
    });
}

int copy_seq(kvweld_engine* e, int32_t src, int32_t dst, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(src != dst, "copy_seq: source and destination are both sequence ", src);
        const int n = len_of(e, src);
        int& to = len_of(e, dst);
        run_steps(e, llama_steps::copy(src, dst));
        to = n;
    });
}

// A context shift the way llama-server does one: the positions removed,
// the later ones moved down (llama.cpp re-rotates their keys at the next
// decode's memory update, its K-shift).
int shift(kvweld_engine* e, int32_t seq, int32_t p0, int32_t p1, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        int& len = len_of(e, seq);
        require(p0 >= 0 && p0 <= p1 && p1 <= len, "shift: positions [", p0, ", ", p1, ") must lie in 0..", len,
                " with p0 <= p1");
        require(llama_memory_can_shift(memory(e)), "shift [", p0, ", ", p1,
                "): llama.cpp cannot shift this context's memory (llama_memory_can_shift)");
        run_steps(e, llama_steps::shift(seq, p0, p1));
        len -= p1 - p0;
    });
}

// A saved state: the plugin's header, then llama.cpp's sequence state.
// llama.cpp's own bytes name no model; the header does, by the digest of
// the model file, and the positions the state holds.
constexpr char kStateMagic[4] = {'K', 'V', 'L', 'S'};
constexpr std::size_t kStateHeader = 16;  // magic, u32 positions, u64 model digest

std::vector<uint8_t> llama_seq_state(kvweld_engine* e, int32_t seq) {
    std::vector<uint8_t> out(llama_state_seq_get_size(e->ctx, seq));
    const std::size_t got = llama_state_seq_get_data(e->ctx, out.data(), out.size(), seq);
    require(got == out.size(), "llama_state_seq_get_data wrote ", got, " bytes of ", out.size());
    return out;
}

int state_save(kvweld_engine* e, int32_t seq, uint8_t* out, size_t cap, size_t* n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        const auto len = std::uint32_t(len_of(e, seq));
        std::vector<uint8_t> bytes(kStateHeader);
        std::memcpy(bytes.data(), kStateMagic, 4);
        std::memcpy(bytes.data() + 4, &len, 4);
        std::memcpy(bytes.data() + 8, &e->model_digest, 8);
        const std::vector<uint8_t> body = llama_seq_state(e, seq);
        bytes.insert(bytes.end(), body.begin(), body.end());
        kvweld::abi::write_sized(bytes, out, cap, n);
    });
}

// llama.cpp empties the sequence when it refuses a state
// (llama_kv_cache::state_read): the plugin keeps what the sequence held
// and puts it back, so a refused load loses nothing.
int state_load(kvweld_engine* e, int32_t seq, const uint8_t* data, size_t n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        int& len = len_of(e, seq);
        require(data && n >= kStateHeader, "state_load: ", n, " bytes, less than the ", kStateHeader, "-byte header");
        require(std::memcmp(data, kStateMagic, 4) == 0, "state_load: not a state this plugin saved (no KVLS magic)");
        std::uint32_t positions = 0;
        std::uint64_t digest = 0;
        std::memcpy(&positions, data + 4, 4);
        std::memcpy(&digest, data + 8, 8);
        require(digest == e->model_digest, "state_load: a state of another model (model file digest ", digest,
                "; this engine's is ", e->model_digest, ")");
        require(positions <= std::uint32_t(e->n_ctx), "state_load: ", positions, " positions, a sequence holds ", e->n_ctx);
        const std::vector<uint8_t> held = len > 0 ? llama_seq_state(e, seq) : std::vector<uint8_t>{};
        const std::size_t read = llama_state_seq_set_data(e->ctx, data + kStateHeader, n - kStateHeader, seq);
        const llama_pos lo = llama_memory_seq_pos_min(memory(e), seq), hi = llama_memory_seq_pos_max(memory(e), seq);
        // Only the plain KV cache holds every position from 0: a recurrent
        // state's cell holds its last, and a sliding window's cache (its
        // seq_pos_min) those still in the window.
        const bool from_zero = !e->arch || e->arch->memory == MemoryKind::kv;
        const bool first_ok = from_zero ? lo == 0 : lo >= 0 && lo <= hi;
        const bool whole = read == n - kStateHeader && (positions == 0 ? hi < 0 : first_ok && hi + 1 == llama_pos(positions));
        if (whole) {
            len = int(positions);
            return;
        }
        llama_memory_seq_rm(memory(e), seq, -1, -1);
        // A cell at a negative position (llama.cpp takes a state's positions
        // unchecked) is out of every range seq_rm removes: a known finding.
        const llama_pos stuck = llama_memory_seq_pos_min(memory(e), seq);
        if (!held.empty())
            require(llama_state_seq_set_data(e->ctx, held.data(), held.size(), seq) == held.size(),
                    "state_load: refused, and the sequence's own state did not load back");
        require(false, "state_load: refused a state of ", n, " bytes: llama.cpp read ", read, " of the ", n - kStateHeader,
                " after the header and holds positions ", lo, "..", hi, " for a state of ", positions,
                stuck == -1 ? std::string() : " (and keeps a cell at position " + std::to_string(stuck) +
                                                  " that llama_memory_seq_rm cannot remove: the sequence is not what it held)");
    });
}

llama_adapter_lora* init_lora(llama_model* model, const std::string& path, std::string& why) {
    error_log = &why;
    llama_adapter_lora* out = llama_adapter_lora_init(model, path.c_str());
    error_log = nullptr;
    trim_log(why);
    return out;
}

// The adapters at `paths`, loaded for `model` where `loaded` has none yet.
std::vector<llama_adapter_lora*> load_loras(llama_model* model, std::map<std::string, llama_adapter_lora*>& loaded,
                                            const std::vector<std::string>& paths) {
    std::vector<llama_adapter_lora*> out;
    for (const std::string& path : paths) {
        std::string why;
        const auto it = loaded.find(path);
        llama_adapter_lora* adapter = it != loaded.end() ? it->second : init_lora(model, path, why);
        require(adapter != nullptr, "llama.cpp cannot load the LoRA adapter ", path, ": ",
                why.empty() ? "llama_adapter_lora_init returned NULL" : why);
        loaded[path] = adapter;
        out.push_back(adapter);
    }
    return out;
}

// llama.h marks it deprecated ("user code should do warmup runs
// manually"); it is still what switches the graph's expert routing.
void set_llama_warmup(llama_context* ctx, bool on) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    llama_set_warmup(ctx, on);
#pragma GCC diagnostic pop
}

// What the engine was given, on `ctx` (a new context after a reload).
void apply_adapters(kvweld_engine* e, llama_context* ctx, std::vector<llama_adapter_lora*> loras) {
    set_llama_warmup(ctx, e->warmup);
    if (e->n_threads > 0) llama_set_n_threads(ctx, e->n_threads, e->n_threads);
    llama_set_embeddings(ctx, e->embeddings);
    llama_set_causal_attn(ctx, e->causal);
    require(kvweld::llama_compat::set_adapters(ctx, loras, e->lora_scales) == 0,
            "llama.cpp refused the LoRA adapters");
    const int32_t n_embd = llama_model_n_embd(e->model);
    require(kvweld::llama_compat::set_cvec(ctx, e->cvec.empty() ? nullptr : e->cvec.data(), e->cvec.size(), n_embd,
                                           e->cvec_start, e->cvec_end) == 0,
            "llama.cpp refused the control vector");
}

int set_loras(kvweld_engine* e, const char* const* paths, const float* scales, int32_t n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        std::vector<std::string> named = kvweld::abi::lora_paths(paths, scales, n);
        std::vector<llama_adapter_lora*> loaded = load_loras(e->model, e->loras, named);
        const bool keep = (e->faults & scales_kept_with_reuse) && e->graph_reuse && named == e->lora_paths;
        e->lora_paths = std::move(named);
        if (keep) return;
        e->lora_scales.assign(scales, scales + n);
        require(kvweld::llama_compat::set_adapters(e->ctx, loaded, e->lora_scales) == 0,
                "llama.cpp refused the LoRA adapters");
    });
}

// llama.cpp's own layout; the range and length are checked here, since
// llama.cpp takes any range and a short buffer (it then keeps the old
// vector's rows past it).
int set_cvec(kvweld_engine* e, const float* data, size_t len, int32_t n_embd, int32_t il_start, int32_t il_end,
             char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        if (data) {
            const int32_t n_layer = llama_model_n_layer(e->model), embd = llama_model_n_embd(e->model);
            require(n_embd == embd, "set_cvec: n_embd ", n_embd, " is not the model's ", embd);
            const std::size_t want = std::size_t(embd) * std::size_t(n_layer - 1);
            require(len == want, "set_cvec: len ", len, " floats: the model needs ", want);
            require(il_start >= 0 && il_start <= il_end && il_end < n_layer, "set_cvec: range [", il_start, ", ",
                    il_end, "] must lie in 0..", n_layer - 1);
        }
        require(kvweld::llama_compat::set_cvec(e->ctx, data, len, n_embd, il_start, il_end) == 0,
                "llama.cpp refused the control vector");
        e->cvec.assign(data, data ? data + len : data);
        e->cvec_start = data ? il_start : -1;
        e->cvec_end = data ? il_end : -1;
    });
}

int set_warmup(kvweld_engine* e, int32_t on, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(on == 0 || on == 1, "set_warmup: on = ", on, ": must be 0 or 1");
        set_llama_warmup(e->ctx, on == 1);
        e->warmup = on == 1;
    });
}

// Two or more LoRA adapters at a non-zero scale: llama.cpp adds their
// deltas in the order of an unordered_map keyed by the adapters' addresses
// (src/llama-adapter.h:90, src/llama-graph.cpp:1534), so two contexts (the
// engine and its twin) can differ in the last bits.
// Measured: a swarm with the twin (kvweld swarm --engine llamacpp --twin
// --seeds 0..199) differed from it on 3 to 6 seeds per run, other seeds
// each run, by up to 1.9e-6 in a logit, every one with two or more LoRA
// adapters set and none of the 33 seeds without adapters. Stale LoRA
// scales or sets move the logits by orders more (the adapter fault
// scales_kept_with_reuse: 1.66 and 1.88 on the first seeds that kill it,
// kvweld mutants --engine llamacpp --fault scales_kept_with_reuse).
double twin_tolerance(const kvweld_engine* e, const char** why) {
    const auto active = std::count_if(e->lora_scales.begin(), e->lora_scales.end(), [](float s) { return s != 0.0f; });
    if (active < 2) return 0.0;
    *why = "llama.cpp adds two or more LoRA deltas in the order of an unordered_map keyed by the adapters' addresses "
           "(src/llama-adapter.h:90, src/llama-graph.cpp:1534), so two contexts can differ in the last bits";
    return 1e-5;
}

// A new model and a new context (llama.cpp's KV lives in the context, so
// every sequence is emptied); the new model is loaded and checked first, so
// a bad file loses nothing. The adapters are loaded for the new model and
// set on the new context, with the control vector, and each sequence's
// sampler chain is made anew there (its draw restarted from its seed).
llama_sampler* new_chain(llama_context* ctx, int32_t seq, const kvweld_sampler& s);

int reload(kvweld_engine* e, const char* path, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(path != nullptr, "reload: no model path");
        const std::uint64_t digest = file_digest(path);
        llama_model* model = load_model(path, e->arch, e->window, digest);
        // The shape a context was sized for: width, depth, heads, KV heads, context, vocabulary.
        bool same = llama_vocab_n_tokens(llama_model_get_vocab(model)) == e->vocab;
        for (auto dim : {llama_model_n_embd, llama_model_n_layer, llama_model_n_head, llama_model_n_head_kv,
                         llama_model_n_ctx_train})
            same = same && dim(model) == dim(e->model);
        const bool reuse = e->graph_reuse && !(e->faults & reload_drops_reuse);
        llama_context* ctx = same ? create_context(model, e->cparams, reuse) : nullptr;
        std::map<std::string, llama_adapter_lora*> loras;
        std::map<int32_t, kvweld_engine::Chain> chains;  // new ones: a context takes a chain once
        try {
            require(same, "reload: ", path, " holds a model of another shape");
            require(ctx != nullptr, "llama.cpp: no context for the reloaded model");
            llama_set_abort_callback(ctx, abort_check, e);
            std::swap(e->model, model);  // apply_adapters reads the model's width
            struct Back {
                kvweld_engine* e;
                llama_model*& other;
                ~Back() { std::swap(e->model, other); }
            } back{e, model};
            apply_adapters(e, ctx, load_loras(e->model, loras, e->lora_paths));
            for (const auto& [seq, c] : e->chains) chains[seq] = {new_chain(ctx, seq, c.spec), c.spec};
        } catch (...) {
            if (ctx) llama_free(ctx);
            for (auto& [seq, c] : chains) llama_sampler_free(c.chain);
            free_loras(loras);
            llama_model_free(model);
            throw;
        }
        e->reused_before += std::uint64_t(std::max(0, llama_perf_context(e->ctx).n_reused));
        if (e->faults & reload_resets_counters) e->reused_before = e->calls = e->calls_reusing = 0;
        llama_free(e->ctx);
        for (auto& [seq, c] : e->chains) llama_sampler_free(c.chain);
        e->chains = std::move(chains);
        free_loras(e->loras);
        llama_model_free(e->model);
        e->ctx = ctx;
        e->placed = 0;
        e->model = model;
        e->model_digest = digest;
        e->loras = std::move(loras);
        for (int& len : e->len)
            if (len > 0) len = 0;
        e->last_seqs.clear();
    });
}

bool takes_non_causal(const kvweld_engine* e) { return e->cparams.n_ubatch >= e->cparams.n_batch; }

// ABI 16: causal_attn only where a call cannot span ubatches (see set_live).
const char* live_list(const kvweld_engine* e) {
    return takes_non_causal(e) ? kvweld::abi::kThreadsEmbeddingsCausal : kvweld::abi::kThreadsAndEmbeddings;
}
int32_t takes_live(const kvweld_engine* e, const char* key, const char* value) {
    return kvweld::abi::lists_live(live_list(e), key, value) ? 1 : 0;
}

// ABI 9, live settings. n_threads (1 or 2: with 4, llama.cpp's spinning
// workers on CI's 2 cores slowed its twin swarms from about 3 s to 80 s when
// ctest ran them side by side) goes to llama_set_n_threads, which sets
// cparams.n_threads and n_threads_batch alone: llm_graph_params::allow_reuse
// compares no thread count (0.3.36 src/llama-graph.h), so a held graph is
// kept, and the rows must not change. ABI 10: embeddings goes to
// llama_set_embeddings, which sets cparams.embeddings (compared by
// allow_reuse: the next graph builds) and makes every token an output
// (llama_context::decode: output_all). Both are given again to the context
// a reload makes.
// causal_attn goes to llama_set_causal_attn, which sets cparams.causal_attn
// (compared by allow_reuse; no reserve) and nothing else: the mask it
// shapes is set on every ubatch from cparams. llama_context::decode asserts
// that a call with it off fits one ubatch (0.3.36 src/llama-context.cpp:1787,
// GGML_ASSERT: the process dies), so only a context whose n_ubatch is its
// n_batch takes it (takes_live), and set_live refuses it elsewhere.
int set_live(kvweld_engine* e, const char* key, const char* value, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        if (key && std::string_view(key) == kvweld::abi::kEmbeddingsKey) {
            e->embeddings = kvweld::abi::embeddings_value(value);
            llama_set_embeddings(e->ctx, e->embeddings);
            e->output_rows.clear();
            e->output_seqs.clear();
            return;
        }
        if (key && std::string_view(key) == kvweld::abi::kCausalKey) {
            const bool causal = kvweld::abi::flag_value(key, value);
            require(causal || takes_non_causal(e), "set_live: causal_attn = 0 needs every call in one ubatch "
                    "(llama.cpp asserts it): this context's n_ubatch ", e->cparams.n_ubatch, " is below its n_batch ",
                    e->cparams.n_batch);
            e->causal = causal;
            llama_set_causal_attn(e->ctx, e->causal);
            return;
        }
        const int n = kvweld::abi::threads_value(key, value, live_list(e));
        llama_set_n_threads(e->ctx, int32_t(n), int32_t(n));
        e->n_threads = n;
    });
}

// llama_get_embeddings_ith of the last call's output row, with pooling
// none: the hidden state after the final norm (the graph's t_embd). With
// pooling=mean|last, llama_get_embeddings_seq of the row's sequence:
// its tokens of the call pooled.
int read_embeddings(const kvweld_engine* e, int32_t row, float* out, int32_t n_embd, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(e->embeddings, "read_embeddings: embeddings are off (the live setting embeddings=1 turns them on)");
        require(row >= 0 && std::size_t(row) < e->output_rows.size(), "read_embeddings: row ", row,
                " out of range: the last call returned ", e->output_rows.size(), " rows");
        const int32_t dim = llama_model_n_embd(e->model);
        require(out && n_embd == dim, "read_embeddings: n_embd ", n_embd, ", the model's is ", dim);
        const int32_t index = e->output_rows[std::size_t(row)];
        const float* got = e->pooled ? llama_get_embeddings_seq(e->ctx, e->output_seqs[std::size_t(row)])
                                     : llama_get_embeddings_ith(e->ctx, index);
        require(got != nullptr, e->pooled ? "llama_get_embeddings_seq" : "llama_get_embeddings_ith",
                " returned NULL for batch index ", index);
        std::copy(got, got + dim, out);
    });
}

int counters(const kvweld_engine* e, kvweld_engine_counters* out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto reused = e->reused_before + std::uint64_t(std::max(0, llama_perf_context(e->ctx).n_reused));
        // A call in several ubatches (n_ubatch) may reuse some graphs and
        // build others: a call that reused none built at least one.
        const auto builds = e->calls - e->calls_reusing;
        if (e->faults & overcount_reused) reused += e->calls;
        *out = {builds, reused, 0};
    });
}

// ABI 11: a chain of greedy, or top_k then dist (llama.h's backend
// sampling, which runs the chain in the decode's graph). A new chain is a
// new object given to llama_set_sampler, which reserves (sched_reserve
// drops every held graph) when it sets a chain or clears one (0.3.36
// src/llama-context.cpp:1282-1335). A change in place empties the chain
// the sequence holds and adds the new samplers: the context keeps the same
// object, and it is not given again (a chain given twice aborts:
// llama_sampler_chain_backend_init, src/llama-sampler.cpp:739).
llama_sampler* fill_chain(llama_sampler* chain, const kvweld_sampler& s) {
    if (s.top_k == 0) {
        llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    } else {
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(s.top_k));
        llama_sampler_chain_add(chain, llama_sampler_init_dist(s.seed));
    }
    return chain;
}

// A new chain set on `ctx` for `seq` (freed again if llama.cpp refuses it).
llama_sampler* new_chain(llama_context* ctx, int32_t seq, const kvweld_sampler& s) {
    llama_sampler* chain = fill_chain(llama_sampler_chain_init(llama_sampler_chain_default_params()), s);
    if (!kvweld::llama_compat::set_sampler(ctx, seq, chain)) {
        llama_sampler_free(chain);
        require(false, "llama.cpp cannot offload a ", s.top_k == 0 ? "greedy" : "top-k", " chain for sequence ", seq);
    }
    return chain;
}

int set_sampler(kvweld_engine* e, int32_t seq, const kvweld_sampler* s, int32_t in_place, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(seq >= 0 && seq < e->n_seq_max, "set_sampler: sequence ", seq, " out of range 0..", e->n_seq_max - 1);
        const auto held = e->chains.find(seq);
        if (!s) {
            if (held == e->chains.end()) return;
            kvweld::llama_compat::set_sampler(e->ctx, seq, nullptr);
            llama_sampler_free(held->second.chain);
            e->chains.erase(held);
            return;
        }
        const int widest = std::min(kvweld::kMaxTopK, e->vocab);
        require(s->top_k >= 0 && s->top_k <= widest, "set_sampler: top_k ", s->top_k, " out of range 0..", widest,
                " (0: greedy)");
        require(!in_place || held != e->chains.end(), "set_sampler: sequence ", seq, " holds no chain to change in place");
        if (in_place) {
            llama_sampler* chain = held->second.chain;
            while (llama_sampler_chain_n(chain) > 0) llama_sampler_free(llama_sampler_chain_remove(chain, 0));
            fill_chain(chain, *s);
            held->second.spec = *s;
            return;
        }
        llama_sampler* chain = new_chain(e->ctx, seq, *s);
        if (held != e->chains.end()) llama_sampler_free(held->second.chain);
        e->chains[seq] = {chain, *s};
    });
}

int sampled(const kvweld_engine* e, int32_t row, int32_t* token, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(token != nullptr, "sampled: no output");
        require(row >= 0 && std::size_t(row) < e->sampled.size(), "sampled: row ", row,
                " out of range: the last call returned ", e->sampled.size(), " rows");
        *token = e->sampled[std::size_t(row)];
    });
}

int set_abort(kvweld_engine* e, int32_t after, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        e->abort_after = after < 0 ? -1 : after;
        e->abort_asked = 0;
    });
}

int seq_length(const kvweld_engine* e, int32_t seq, int32_t* n, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(n != nullptr, "seq_length: no output");
        require(seq >= 0 && seq < e->n_seq_max, "seq_length: sequence ", seq, " out of range 0..", e->n_seq_max - 1);
        *n = int32_t(llama_memory_seq_pos_max(llama_get_memory(e->ctx), seq)) + 1;
    });
}

// Left out: storage identity, KV reads, layer swaps, a paged pool and a
// plan identity (llama.cpp's public API exposes none of them).
const kvweld_engine_api kApi = {
    .abi_version = KVWELD_ENGINE_ABI_VERSION,
    .name = "llamacpp",
    .model_format = "gguf",
    .capabilities =
        KVWELD_CAP_COPY_SEQ | KVWELD_CAP_PLAN_COUNTERS | KVWELD_CAP_RELOAD | KVWELD_CAP_OUTPUTS | KVWELD_CAP_MOE |
        KVWELD_CAP_WARMUP | KVWELD_CAP_SHIFT | KVWELD_CAP_STATE | KVWELD_CAP_EMBEDDINGS | KVWELD_CAP_ABORT |
        KVWELD_CAP_KEEP |
        // What this release's llama.h lacks is not declared (llama_compat.hpp).
        (kvweld::llama_compat::kHasLora ? KVWELD_CAP_LORA : 0u) | (kvweld::llama_compat::kHasCvec ? KVWELD_CAP_CVEC : 0u) |
        (kvweld::llama_compat::kHasBackendSampling ? KVWELD_CAP_SAMPLERS : 0u),
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
    .read_kv = nullptr,
    .swap_layer = nullptr,
    .pool_info = nullptr,
    .block_table = nullptr,
    .block_refcount = nullptr,
    .pool_op = nullptr,
    .plan_serial = nullptr,
    .set_loras = set_loras,
    .set_cvec = set_cvec,
    .decode_outputs = decode_outputs,
    .set_warmup = set_warmup,
    .no_reuse_param = "graph_reuse=0",  // LLAMA_GRAPH_REUSE_DISABLE for the twin's context
    .twin_tolerance = twin_tolerance,
    .shift = shift,
    .state_save = state_save,
    .state_load = state_load,
    .build = KVWELD_LLAMA_BUILD,  // from the install's .kvweld-source (scripts/setup-llama), at configure time
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
    .n_settings = settings().size(),
    .create_v16 = create,
    .takes_live = takes_live,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) {
    own_reuse_env();
    return &kApi;
}
