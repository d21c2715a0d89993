#include "targets/plugin_host.hpp"

#include "targets/abi_lists.hpp"
#include "targets/isolation/remote_table.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "engine/checkpoint.hpp"
#include "engine/gguf.hpp"
#include "util/file_bytes.hpp"
#include "engine/kv_cache.hpp"

#include <dlfcn.h>
#include <algorithm>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <filesystem>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>

namespace kvweld::targets {

namespace {

constexpr std::size_t kErrLen = 512;

// Version 4 fault classes must name known classes; older tables have none.
std::string fault_classes_problem(const kvweld_engine_api& api) {
    for (const abi::ListedFault& f : abi::split_fault_list(api.fault_names)) {
        if (f.classes.empty()) continue;
        if (api.abi_version < 4) return cat("lists classes for fault '", f.name, "' in a version ", api.abi_version, " table");
        try {
            Detections::parse(f.classes);
        } catch (const Error& e) {
            return cat("lists fault '", f.name, "' with bad classes: ", e.what());
        }
    }
    return "";
}

// The bytes of a table of each version before 14, up to the first field
// the next version added; from 14 on a table says its own size.
std::size_t table_bytes(std::uint32_t version) {
    using A = kvweld_engine_api;
    constexpr std::array<std::size_t, 12> ends{offsetof(A, pool_info),      offsetof(A, plan_serial),
                                               offsetof(A, set_loras),      offsetof(A, set_warmup),
                                               offsetof(A, shift),          offsetof(A, build),
                                               offsetof(A, live_settings),  offsetof(A, read_embeddings),
                                               offsetof(A, set_sampler),    offsetof(A, set_abort),
                                               offsetof(A, live_settings_of), offsetof(A, struct_size)};
    return ends[version - 2];
}

// Version 14 on: the table's struct_size, which must reach past itself.
std::string size_problem(const kvweld_engine_api& api) {
    constexpr std::size_t least = offsetof(kvweld_engine_api, struct_size) + sizeof(std::size_t);
    if (api.struct_size < least)
        return cat("says its table is ", api.struct_size, " bytes (struct_size): a version ", api.abi_version,
                   " table is at least ", least);
    return "";
}

// The table as this host reads it: the plugin's bytes, as many as its
// version (or struct_size) says and this host knows, the rest zero.
kvweld_engine_api copy_by_size(const kvweld_engine_api& api) {
    kvweld_engine_api out{};
    const std::size_t n = api.abi_version >= 14 ? std::min(api.struct_size, sizeof out) : table_bytes(api.abi_version);
    std::memcpy(static_cast<void*>(&out), &api, n);
    out.capabilities &= (KVWELD_CAP_KEEP << 1) - 1;  // a newer table's capabilities this host cannot use
    return out;
}

// What a table (as this host reads it) gets wrong: a capability newer than
// its version, a function or name it declares but leaves empty.
std::string table_problem(const kvweld_engine_api& t) {
    const kvweld_engine_api* api = &t;
    std::string problem;
    if (api->abi_version < 3 && (api->capabilities & (KVWELD_CAP_BLOCKS | KVWELD_CAP_POOL_OPS)))
        problem = "declares a version 3 capability in a version 2 table";
    else if (api->abi_version < 4 && (api->capabilities & KVWELD_CAP_PLAN_SERIAL))
        problem = "declares a version 4 capability in an older table";
    else if (api->abi_version < 5 && (api->capabilities & (KVWELD_CAP_LORA | KVWELD_CAP_CVEC | KVWELD_CAP_OUTPUTS)))
        problem = "declares a version 5 capability in an older table";
    else if (api->abi_version < 6 && (api->capabilities & (KVWELD_CAP_MOE | KVWELD_CAP_WARMUP)))
        problem = "declares a version 6 capability in an older table";
    else if (api->abi_version < 7 && (api->capabilities & (KVWELD_CAP_SHIFT | KVWELD_CAP_STATE)))
        problem = "declares a version 7 capability in an older table";
    else if (api->abi_version < 10 && (api->capabilities & KVWELD_CAP_EMBEDDINGS))
        problem = "declares a version 10 capability in an older table";
    else if (api->abi_version < 11 && (api->capabilities & KVWELD_CAP_SAMPLERS))
        problem = "declares a version 11 capability in an older table";
    else if (api->abi_version < 12 && (api->capabilities & KVWELD_CAP_ABORT))
        problem = "declares a version 12 capability in an older table";
    else if (api->abi_version < 14 && (api->capabilities & KVWELD_CAP_KEEP))
        problem = "declares a version 14 capability in an older table";
    else if (!api->name || !api->model_format || !api->fault_names || (!api->create && !api->create_v16) || !api->destroy || !api->vocab || !api->open_seq ||
             !api->close_seq || !api->decode || !api->truncate || !api->clear_seq || !api->clear_all)
        problem = "leaves a required function or name empty";
    else if (((api->capabilities & KVWELD_CAP_COPY_SEQ) && !api->copy_seq) ||
             ((api->capabilities & KVWELD_CAP_PLAN_COUNTERS) && !api->counters) ||
             ((api->capabilities & KVWELD_CAP_RELOAD) && !api->reload) ||
             ((api->capabilities & KVWELD_CAP_STORAGE) && !api->storage) ||
             ((api->capabilities & KVWELD_CAP_READ_KV) && !api->read_kv) ||
             ((api->capabilities & KVWELD_CAP_SWAP_LAYER) && !api->swap_layer) ||
             ((api->capabilities & KVWELD_CAP_BLOCKS) && (!api->pool_info || !api->block_table || !api->block_refcount)) ||
             ((api->capabilities & KVWELD_CAP_POOL_OPS) && !api->pool_op) ||
             ((api->capabilities & KVWELD_CAP_PLAN_SERIAL) && !api->plan_serial) ||
             ((api->capabilities & KVWELD_CAP_LORA) && !api->set_loras) ||
             ((api->capabilities & KVWELD_CAP_CVEC) && !api->set_cvec) ||
             ((api->capabilities & KVWELD_CAP_OUTPUTS) && !api->decode_outputs) ||
             ((api->capabilities & KVWELD_CAP_WARMUP) && !api->set_warmup) ||
             ((api->capabilities & KVWELD_CAP_SHIFT) && !api->shift) ||
             ((api->capabilities & KVWELD_CAP_STATE) && (!api->state_save || !api->state_load)) ||
             ((api->capabilities & KVWELD_CAP_EMBEDDINGS) && !api->read_embeddings) ||
             ((api->capabilities & KVWELD_CAP_SAMPLERS) && (!api->set_sampler || !api->sampled)) ||
             ((api->capabilities & KVWELD_CAP_ABORT) && (!api->set_abort || !api->seq_length)) ||
             ((api->capabilities & KVWELD_CAP_KEEP) && !api->keep_seq))
        problem = "declares a capability whose function is empty";
    else if (const int rule = !!api->rule_create + !!api->rule_destroy + !!api->rule_on_call + !!api->rule_on_decode +
                              !!api->rule_why;
             rule != 0 && rule != 5)
        problem = cat("ships ", rule, " of the rule's 5 functions (rule_create, rule_destroy, rule_on_call, "
                      "rule_on_decode, rule_why): all or none");
    else if (api->live_settings && *api->live_settings && !api->set_live)
        problem = cat("lists live settings (", api->live_settings, ") but leaves set_live empty");
    else if (api->live_settings)
        for (const abi::LiveSetting& s : abi::split_live_list(api->live_settings))
            if (s.values.empty()) problem = cat("lists live setting '", s.key, "' with no values (\"key:v1|v2\")");
    if (problem.empty() && (api->capabilities & KVWELD_CAP_EMBEDDINGS)) {
        bool listed = false;
        for (const abi::LiveSetting& s : abi::split_live_list(api->live_settings))
            listed = listed || s.key == abi::kEmbeddingsKey;
        if (!listed) problem = "declares KVWELD_CAP_EMBEDDINGS but lists no live setting 'embeddings'";
    }
    return problem;
}

// Version 15: what a table's settings get wrong, if anything.
std::string settings_problem(const kvweld_engine_api& t) {
    if (t.n_settings < 0 || t.n_settings > 1024 || (t.n_settings > 0 && !t.settings))
        return cat("lists ", t.n_settings, " settings", t.settings ? "" : " and no table of them", " (0..1024)");
    if ((t.fault_names && *t.fault_names) || (t.live_settings && *t.live_settings))
        return "describes its settings twice: as settings and as fault_names or live_settings (one or the other)";
    for (int32_t i = 0; i < t.n_settings; ++i) {
        const kvweld_setting& s = t.settings[i];
        const char* kinds[] = {"param", "live setting", "fault"};
        if (s.kind < KVWELD_SETTING_PARAM || s.kind > KVWELD_SETTING_FAULT)
            return cat("lists setting ", i, " of kind ", s.kind, ": the kinds are 0 (param), 1 (live), 2 (fault)");
        if (!s.name || !*s.name || std::strpbrk(s.name, ",=:|"))
            return cat("lists ", kinds[s.kind], " ", i, " with the name '", s.name ? s.name : "(null)",
                       "': a name is not empty and has no ',', '=', ':' or '|'");
        for (int32_t j = 0; j < i; ++j)
            if (t.settings[j].kind == s.kind && std::strcmp(t.settings[j].name, s.name) == 0)
                return cat("lists ", kinds[s.kind], " '", s.name, "' twice");
        if (s.kind == KVWELD_SETTING_LIVE && (!s.values || !s.values[0]))
            return cat("lists live setting '", s.name, "' with no values a swarm may draw");
        for (const char* const* v = s.values; v && *v; ++v)
            if (!**v || std::strpbrk(*v, ",|"))
                return cat("lists ", kinds[s.kind], " '", s.name, "' with the value '", *v,
                           "': a value is not empty and has no ',' or '|'");
    }
    return "";
}

// "name:v1|v2" entries of one kind, comma-separated: the text lists the
// rest of this host reads, built from a version 15 table's settings.
std::string settings_text(const kvweld_engine_api& t, int32_t kind) {
    std::string out;
    for (int32_t i = 0; i < t.n_settings; ++i) {
        if (t.settings[i].kind != kind) continue;
        out += cat(out.empty() ? "" : ",", t.settings[i].name);
        for (const char* const* v = t.settings[i].values; v && *v; ++v)
            out += cat(v == t.settings[i].values ? ":" : "|", *v);
    }
    return out;
}

}  // namespace

PluginSettings::PluginSettings(const kvweld_engine_api& t)
    : declared(t.abi_version >= 15 && t.settings != nullptr), faults(settings_text(t, KVWELD_SETTING_FAULT)),
      live(settings_text(t, KVWELD_SETTING_LIVE)),
      params(abi::split_live_list(settings_text(t, KVWELD_SETTING_PARAM).c_str())) {}

std::string PluginSettings::params_problem(const char* given) const {
    if (!declared) return "";
    std::vector<std::string> keys, seen;
    for (const abi::LiveSetting& p : params) keys.push_back(p.key);
    for (const std::string& item : abi::split_list(given)) {
        try {
            const auto one = abi::parse_params(item.c_str(), keys);
            const std::string key = one.begin()->first, value = one.begin()->second;
            if (std::find(seen.begin(), seen.end(), key) != seen.end())
                return cat("setting '", item, "': ", key, " is given twice");
            seen.push_back(key);
            const auto it = std::find_if(params.begin(), params.end(), [&](const abi::LiveSetting& p) { return p.key == key; });
            if (!it->values.empty() && std::find(it->values.begin(), it->values.end(), value) == it->values.end()) {
                std::string takes;
                for (const std::string& v : it->values) takes += cat(takes.empty() ? "" : ", ", v);
                return cat("setting '", item, "': ", key, " takes ", takes);
            }
        } catch (const std::exception& e) {
            return e.what();
        }
    }
    return "";
}

std::shared_ptr<const PluginLibrary> PluginLibrary::open(const std::string& path) {
    // RTLD_LOCAL: two plugins' symbols never collide; RTLD_NOW: a missing
    // dependency is an error here, not a crash on first call.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw Error(cat("engine plugin ", path, ": cannot load: ", dlerror()));
    auto entry = reinterpret_cast<kvweld_engine_entry_fn>(dlsym(handle, KVWELD_ENGINE_ENTRY));
    const kvweld_engine_api* api = entry ? entry() : nullptr;
    std::string problem;
    if (!entry) problem = cat("has no symbol '", KVWELD_ENGINE_ENTRY, "': not a kvweld engine plugin");
    else if (!api) problem = cat(KVWELD_ENGINE_ENTRY, "() returned no table");
    else if (api->abi_version < 2)
        problem = cat("was built for engine ABI version ", api->abi_version, ", this kvweld speaks versions 2..",
                      KVWELD_ENGINE_ABI_VERSION, " and later ones read by their struct_size");
    else if (api->abi_version >= 14)
        problem = size_problem(*api);
    if (!problem.empty()) {
        dlclose(handle);
        throw Error(cat("engine plugin ", path, " ", problem));
    }
    const kvweld_engine_api table = copy_by_size(*api);
    if (table.abi_version >= 15 && (table.settings || table.n_settings)) problem = settings_problem(table);
    if (!problem.empty()) {
        dlclose(handle);
        throw Error(cat("engine plugin ", path, " ", problem));
    }
    // Made before the rest is checked: its table holds the text lists built
    // from a version 15 table's settings (its destructor closes the handle).
    std::shared_ptr<const PluginLibrary> library(new PluginLibrary(path, handle, table));
    problem = table_problem(library->api_);
    if (problem.empty() && library->api_.fault_names) problem = fault_classes_problem(library->api_);
    if (!problem.empty()) throw Error(cat("engine plugin ", path, " ", problem));
    return library;
}

PluginLibrary::PluginLibrary(std::string path, void* handle, const kvweld_engine_api& api)
    : path_(std::move(path)), handle_(handle), api_(api), settings_(api) {
    if (settings_.declared) {
        api_.fault_names = settings_.faults.c_str();
        api_.live_settings = settings_.live.c_str();
    }
}

PluginLibrary::~PluginLibrary() { dlclose(handle_); }

template <class Fn>
void PluginEngine::call(const char* what, Fn&& fn, bool decode) const {
    std::array<char, kErrLen> err{};
    const int rc = fn(err.data(), err.size());
    if (rc == 0) return;
    err.back() = '\0';  // whatever the plugin wrote, the message ends here
    if (isolated_ && rc == isolation::kProcessLost)
        throw Crashed(cat("engine ", api_.name, ": ", what, ": ", err.data()), isolation::remote_crash_title(engine_));
    // Only a decode returns KVWELD_ABORTED, and only with the capability.
    const bool aborted = decode && rc == KVWELD_ABORTED && (capabilities() & KVWELD_CAP_ABORT);
    const std::string message = cat("engine ", api_.name, ": ", what, aborted ? " aborted: " : " failed: ",
                                    err[0] ? err.data() : "(no message)");
    if (aborted) throw Aborted(message);
    throw Error(message);
}

// Every plugin's create and reload, one at a time across the process: an
// engine may set process-wide state while it makes its context (llama.cpp's
// plugin, LLAMA_GRAPH_REUSE_DISABLE), and two plugins loaded at once (two
// releases of one engine, kvweld diff) share it without sharing a lock.
std::mutex plugin_create_lock;

PluginEngine::PluginEngine(std::shared_ptr<const PluginLibrary> library, const kvweld_engine_options& options,
                           std::optional<int> isolated_ms)
    : library_(std::move(library)),
      api_(isolated_ms ? isolation::remote_table(library_->api()) : library_->api()),
      isolated_(isolated_ms.has_value()) {
    // Version 15: the settings it declared, checked here, so the plugin sees only those.
    if (const std::string problem = library_->settings().params_problem(options.params); !problem.empty())
        throw Error(cat("engine ", api_.name, ": ", problem));
    // Version 16: given to create_v16 as data.
    const GivenSettings settings = GivenSettings::from_text(options.faults, options.params);
    if (isolated_) {
        // Its own process: no lock (the process-wide state is that process's).
        try {
            call("create", [&](char* e, std::size_t n) {
                return isolation::remote_create(library_->path(), options, settings, *isolated_ms, &engine_, e, n);
            });
        } catch (const Error&) {
            if (engine_) api_.destroy(engine_);
            throw;
        }
    } else {
        const std::lock_guard<std::mutex> lock(plugin_create_lock);
        call("create", [&](char* e, std::size_t n) { return create_engine(api_, options, settings, &engine_, e, n); });
    }
    require(engine_ != nullptr, "engine ", api_.name, ": create succeeded but returned no engine");
    vocab_ = api_.vocab(engine_);
    if (vocab_ <= 0) {
        api_.destroy(engine_);
        throw Error(cat("engine ", api_.name, ": vocab() = ", vocab_, ": must be positive"));
    }
}

std::vector<std::string> PluginEngine::fault_names() const {
    std::vector<std::string> out;
    for (const abi::ListedFault& f : abi::split_fault_list(api_.fault_names)) out.push_back(f.name);
    return out;
}

PluginEngine::~PluginEngine() { api_.destroy(engine_); }

void PluginEngine::apply(const MemoryCall& call) { apply_to_members(*this, call); }

// The white box's calls: a plugin has none.
void PluginEngine::open_sized(int seq, int capacity, bool) {
    throw Error(cat("engine ", name(), " runs behind the plugin ABI: no white box for an open of sequence ", seq, " with ",
                    capacity, " positions"));
}

void PluginEngine::migrate(int from, int to) {
    throw Error(cat("engine ", name(), " runs behind the plugin ABI: no white box for a migration from ", from, " to ", to));
}

void PluginEngine::open(int seq) {
    call("open_seq", [&](char* e, std::size_t n) { return api_.open_seq(engine_, seq, e, n); });
}

void PluginEngine::close(int seq) {
    call("close_seq", [&](char* e, std::size_t n) { return api_.close_seq(engine_, seq, e, n); });
}

std::vector<float> PluginEngine::decode(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens,
                                        std::span<const std::uint8_t> outputs) {
    require(seqs.size() == tokens.size(), "decode: ", seqs.size(), " sequences for ", tokens.size(), " tokens");
    if (outputs.empty()) {
        std::vector<float> logits(seqs.size() * static_cast<std::size_t>(vocab_));
        call("decode", [&](char* e, std::size_t n) {
            return api_.decode(engine_, seqs.data(), tokens.data(), static_cast<std::int32_t>(seqs.size()),
                                          logits.data(), e, n);
        }, true);
        return logits;
    }
    require(capabilities() & KVWELD_CAP_OUTPUTS, "engine ", name(),
            " returns every row (no KVWELD_CAP_OUTPUTS): it cannot decode an output subset");
    require(outputs.size() == seqs.size(), "decode: ", outputs.size(), " output flags for ", seqs.size(), " pairs");
    const auto rows = std::size_t(std::count_if(outputs.begin(), outputs.end(), [](std::uint8_t o) { return o != 0; }));
    std::vector<float> logits(rows * static_cast<std::size_t>(vocab_));
    call("decode_outputs", [&](char* e, std::size_t n) {
        return api_.decode_outputs(engine_, seqs.data(), tokens.data(), outputs.data(),
                                              static_cast<std::int32_t>(seqs.size()), logits.data(), e, n);
    }, true);
    return logits;
}

void PluginEngine::truncate(int seq, int len) {
    call("truncate", [&](char* e, std::size_t n) { return api_.truncate(engine_, seq, len, e, n); });
}

void PluginEngine::shift(int seq, int p0, int p1) {
    require(capabilities() & KVWELD_CAP_SHIFT, "engine ", name(), " cannot shift a sequence (no KVWELD_CAP_SHIFT)");
    call("shift", [&](char* e, std::size_t n) { return api_.shift(engine_, seq, p0, p1, e, n); });
}

std::vector<std::uint8_t> PluginEngine::state_save(int seq) {
    require(capabilities() & KVWELD_CAP_STATE, "engine ", name(), " cannot save a sequence's state (no KVWELD_CAP_STATE)");
    std::size_t size = 0;
    call("state_save (size)", [&](char* e, std::size_t n) {
        return api_.state_save(engine_, seq, nullptr, 0, &size, e, n);
    });
    // No state can be larger than the largest KV a cache may hold.
    require(size <= kMaxCacheBytes, "engine ", name(), ": state_save reports ", size, " bytes: the limit is ",
            kMaxCacheBytes);
    std::vector<std::uint8_t> out(size);
    std::size_t written = 0;
    call("state_save", [&](char* e, std::size_t n) {
        return api_.state_save(engine_, seq, out.data(), out.size(), &written, e, n);
    });
    require(written == size, "engine ", name(), ": state_save wrote ", written, " bytes after reporting ", size);
    return out;
}

void PluginEngine::state_load(int seq, std::span<const std::uint8_t> bytes) {
    require(capabilities() & KVWELD_CAP_STATE, "engine ", name(), " cannot load a sequence's state (no KVWELD_CAP_STATE)");
    call("state_load", [&](char* e, std::size_t n) {
        return api_.state_load(engine_, seq, bytes.data(), bytes.size(), e, n);
    });
}

void PluginEngine::clear(int seq) {
    call("clear_seq", [&](char* e, std::size_t n) { return api_.clear_seq(engine_, seq, e, n); });
}

void PluginEngine::keep(int seq) {
    require(capabilities() & KVWELD_CAP_KEEP, "engine ", name(), " cannot keep one sequence (no KVWELD_CAP_KEEP)");
    call("keep_seq", [&](char* e, std::size_t n) { return api_.keep_seq(engine_, seq, e, n); });
}

void PluginEngine::clear_all() {
    call("clear_all", [&](char* e, std::size_t n) { return api_.clear_all(engine_, e, n); });
}

void PluginEngine::copy(int src, int dst) {
    require(capabilities() & KVWELD_CAP_COPY_SEQ, "engine ", name(), " cannot copy sequences (no KVWELD_CAP_COPY_SEQ)");
    call("copy_seq", [&](char* e, std::size_t n) { return api_.copy_seq(engine_, src, dst, e, n); });
}

namespace {

std::string temp_path(const std::string& format) {
    require(format == "gguf" || format == "llama2c", "model format '", format,
            "' asked for: this kvweld writes gguf or llama2c");
    static std::atomic<std::uint64_t> serial{0};
    return (std::filesystem::temp_directory_path() / cat("kvweld-", ::getpid(), "-", serial++, ".", format)).string();
}

}  // namespace

ModelFile::ModelFile(const Model& model, const std::string& format) : path_(temp_path(format)) {
    if (format == "gguf")
        save_gguf(model, path_);
    else
        save_llama2c(model, path_);
}

// Adapters are llama.cpp's adapter GGUF for every engine (the llama2.c
// format has none).
ModelFile::ModelFile(const LoraAdapter& adapter) : path_(temp_path("gguf")) {
    write_file(path_, serialize_gguf_lora(adapter), "LoRA adapter");
}

ModelFile::~ModelFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
}

// Each adapter is written once and kept while the engine lives.
void PluginEngine::set_loras(std::span<const LoraUse> uses) {
    require(capabilities() & KVWELD_CAP_LORA, "engine ", name(), " takes no LoRA adapters (no KVWELD_CAP_LORA)");
    std::vector<const char*> paths;
    std::vector<float> scales;
    for (const LoraUse& u : uses) {
        auto& file = adapter_files_[u.adapter->id().get()];
        if (!file) file = std::make_unique<ModelFile>(*u.adapter);
        paths.push_back(file->path().c_str());
        scales.push_back(u.scale);
    }
    call("set_loras", [&](char* e, std::size_t n) {
        return api_.set_loras(engine_, paths.data(), scales.data(), std::int32_t(paths.size()), e, n);
    });
}

// llama.cpp's layout: n_embd floats per layer from layer 1.
void PluginEngine::set_cvec(const ControlVector* cvec) {
    require(capabilities() & KVWELD_CAP_CVEC, "engine ", name(), " takes no control vector (no KVWELD_CAP_CVEC)");
    call("set_cvec", [&](char* e, std::size_t n) {
        if (!cvec) return api_.set_cvec(engine_, nullptr, 0, 0, -1, -1, e, n);
        const auto dim = std::size_t(cvec->dim);
        require(dim >= 1 && dim <= cvec->data.size(), "set_cvec: a control vector of dim ", cvec->dim, " and ",
                cvec->data.size(), " floats");
        return api_.set_cvec(engine_, cvec->data.data() + dim, cvec->data.size() - dim, cvec->dim,
                                        cvec->start, cvec->end, e, n);
    });
}

void PluginEngine::set_warmup(bool on) {
    require(capabilities() & KVWELD_CAP_WARMUP, "engine ", name(), " has no warmup mode (no KVWELD_CAP_WARMUP)");
    call("set_warmup", [&](char* e, std::size_t n) { return api_.set_warmup(engine_, on ? 1 : 0, e, n); });
}

// ABI 16: the values of the plugin's list this engine takes, asked one by one.
std::string PluginEngine::live_settings_taken() const {
    std::string out;
    for (const abi::LiveSetting& s : abi::split_live_list(api_.live_settings)) {
        std::string values;
        for (const std::string& v : s.values)
            if (api_.takes_live(engine_, s.key.c_str(), v.c_str()) != 0) values += cat(values.empty() ? "" : "|", v);
        if (!values.empty()) out += cat(out.empty() ? "" : ",", s.key, ":", values);
    }
    return out;
}

// ABI 13: the engine's own list, which must be a part of the plugin's.
std::string PluginEngine::live_settings() const {
    const kvweld_engine_api& api = api_;
    if (api.takes_live) return live_settings_taken();
    const std::string all = api.live_settings ? api.live_settings : "";
    const char* mine = api.live_settings_of ? api.live_settings_of(engine_) : nullptr;
    if (!mine) return all;
    const std::vector<abi::LiveSetting> listed = abi::split_live_list(all.c_str());
    for (const abi::LiveSetting& s : abi::split_live_list(mine)) {
        const auto it = std::find_if(listed.begin(), listed.end(), [&](const abi::LiveSetting& l) { return l.key == s.key; });
        for (const std::string& v : s.values)
            require(it != listed.end() && std::find(it->values.begin(), it->values.end(), v) != it->values.end(),
                    "engine ", name(), "'s live_settings_of lists ", s.key, ":", v, ", which its plugin's list (", all,
                    ") does not");
    }
    return mine;
}

void PluginEngine::set_live(const std::string& key, const std::string& value) {
    require(abi::split_live_list(live_settings().c_str()).size() > 0, "engine ", name(),
            " lists no live settings (ABI 9 live_settings)");
    call("set_live", [&](char* e, std::size_t n) { return api_.set_live(engine_, key.c_str(), value.c_str(), e, n); });
}

std::vector<float> PluginEngine::embeddings(int row, int n_embd) const {
    require(capabilities() & KVWELD_CAP_EMBEDDINGS, "engine ", name(),
            " reads back no embeddings (no KVWELD_CAP_EMBEDDINGS)");
    require(n_embd > 0, "embeddings: n_embd ", n_embd);
    std::vector<float> out(static_cast<std::size_t>(n_embd));
    call("read_embeddings", [&](char* e, std::size_t n) {
        return api_.read_embeddings(engine_, row, out.data(), int32_t(out.size()), e, n);
    });
    return out;
}

void PluginEngine::set_sampler(int seq, const SamplerSpec* spec, bool in_place) {
    require(capabilities() & KVWELD_CAP_SAMPLERS, "engine ", name(), " has no backend samplers (no KVWELD_CAP_SAMPLERS)");
    const kvweld_sampler s{spec ? spec->top_k : 0, spec ? spec->seed : 0};
    call("set_sampler", [&](char* e, std::size_t n) {
        return api_.set_sampler(engine_, seq, spec ? &s : nullptr, in_place ? 1 : 0, e, n);
    });
}

void PluginEngine::set_abort(int after) {
    require(capabilities() & KVWELD_CAP_ABORT, "engine ", name(), " has no abort callback (no KVWELD_CAP_ABORT)");
    call("set_abort", [&](char* e, std::size_t n) { return api_.set_abort(engine_, after, e, n); });
}

int PluginEngine::seq_length(int seq) const {
    require(capabilities() & KVWELD_CAP_ABORT, "engine ", name(), " reports no sequence length (no KVWELD_CAP_ABORT)");
    std::int32_t len = -1;
    call("seq_length", [&](char* e, std::size_t n) { return api_.seq_length(engine_, seq, &len, e, n); });
    return len;
}

int PluginEngine::sampled(int row) const {
    require(capabilities() & KVWELD_CAP_SAMPLERS, "engine ", name(), " samples no tokens (no KVWELD_CAP_SAMPLERS)");
    int32_t token = -1;
    call("sampled", [&](char* e, std::size_t n) { return api_.sampled(engine_, row, &token, e, n); });
    require(token >= -1 && token < vocab_, "engine ", name(), ": sampled token ", token, " for row ", row,
            " is outside -1..", vocab_ - 1);
    return token;
}

TwinTolerance PluginEngine::twin_tolerance() const {
    const kvweld_engine_api& api = api_;
    if (!api.twin_tolerance) return {};
    const char* why = nullptr;
    const double t = api.twin_tolerance(engine_, &why);
    // A tolerance is a loosened oracle: only a finite, small one, with its reason.
    require(std::isfinite(t) && t >= 0.0 && t <= 1e-2, "engine ", name(), " declares a twin tolerance of ", t,
            ": must be in 0..0.01");
    require(t == 0.0 || (why && *why), "engine ", name(), " declares a twin tolerance of ", t, " without a reason");
    return {t, why};
}

void PluginEngine::reload(const Model& model) {
    require(capabilities() & KVWELD_CAP_RELOAD, "engine ", name(), " cannot reload its model (no KVWELD_CAP_RELOAD)");
    const ModelFile file(model, model_format());
    std::unique_lock<std::mutex> lock(plugin_create_lock, std::defer_lock);
    if (!isolated_) lock.lock();
    call("reload", [&](char* e, std::size_t n) { return api_.reload(engine_, file.path().c_str(), e, n); });
}

std::vector<std::uint64_t> PluginEngine::storage(int seq, int which, int n_layers) const {
    require(capabilities() & KVWELD_CAP_STORAGE, "engine ", name(), " reports no storage (no KVWELD_CAP_STORAGE)");
    std::vector<std::uint64_t> out(std::size_t(n_layers), 0);
    call("storage", [&](char* e, std::size_t n) {
        return api_.storage(engine_, seq, which, out.data(), n_layers, e, n);
    });
    return out;
}

void PluginEngine::read_kv(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const {
    require(capabilities() & KVWELD_CAP_READ_KV, "engine ", name(), " cannot read KV (no KVWELD_CAP_READ_KV)");
    require(k.size() == v.size(), "read_kv: k and v of different sizes");
    call("read_kv", [&](char* e, std::size_t n) {
        return api_.read_kv(engine_, seq, layer, pos, k.data(), v.data(), std::int32_t(k.size()), e, n);
    });
}

void PluginEngine::swap_layer(int seq, int layer) {
    require(capabilities() & KVWELD_CAP_SWAP_LAYER, "engine ", name(), " cannot swap layers (no KVWELD_CAP_SWAP_LAYER)");
    call("swap_layer", [&](char* e, std::size_t n) { return api_.swap_layer(engine_, seq, layer, e, n); });
}

kvweld_pool_info PluginEngine::pool_info() const {
    require(capabilities() & KVWELD_CAP_BLOCKS, "engine ", name(), " has no KV pool (no KVWELD_CAP_BLOCKS)");
    kvweld_pool_info out{};
    call("pool_info", [&](char* e, std::size_t n) { return api_.pool_info(engine_, &out, e, n); });
    return out;
}

std::vector<int> PluginEngine::block_table(int seq) const {
    require(capabilities() & KVWELD_CAP_BLOCKS, "engine ", name(), " has no KV pool (no KVWELD_CAP_BLOCKS)");
    std::vector<std::int32_t> out(64);
    for (;;) {
        std::int32_t count = -1;
        call("block_table", [&](char* e, std::size_t n) {
            return api_.block_table(engine_, seq, out.data(), std::int32_t(out.size()), &count, e, n);
        });
        require(count >= 0 && count <= (1 << 24), "engine ", name(), ": block_table reported ", count, " blocks");
        if (std::size_t(count) <= out.size()) return std::vector<int>(out.begin(), out.begin() + count);
        out.resize(std::size_t(count));
    }
}

int PluginEngine::block_refcount(int block) const {
    require(capabilities() & KVWELD_CAP_BLOCKS, "engine ", name(), " has no KV pool (no KVWELD_CAP_BLOCKS)");
    std::int32_t out = -1;
    call("block_refcount", [&](char* e, std::size_t n) { return api_.block_refcount(engine_, block, &out, e, n); });
    return out;
}

void PluginEngine::pool_op(int op) {
    require(capabilities() & KVWELD_CAP_POOL_OPS, "engine ", name(), " has no pool ops (no KVWELD_CAP_POOL_OPS)");
    call(op == KVWELD_POOL_GROW ? "pool_op(grow)" : "pool_op(compact)",
         [&](char* e, std::size_t n) { return api_.pool_op(engine_, op, e, n); });
}

std::uint64_t PluginEngine::plan_serial(int seq) const {
    require(capabilities() & KVWELD_CAP_PLAN_SERIAL, "engine ", name(), " reports no plan identity (no KVWELD_CAP_PLAN_SERIAL)");
    std::uint64_t out = 0;
    call("plan_serial", [&](char* e, std::size_t n) { return api_.plan_serial(engine_, seq, &out, e, n); });
    return out;
}

std::optional<kvweld_engine_counters> PluginEngine::counters() const {
    if (!(capabilities() & KVWELD_CAP_PLAN_COUNTERS)) return std::nullopt;
    kvweld_engine_counters out{};
    call("counters", [&](char* e, std::size_t n) { return api_.counters(engine_, &out, e, n); });
    return out;
}

}  // namespace kvweld::targets
