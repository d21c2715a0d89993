// The plugin host: an engine loaded as a plugin through the C ABI
// (include/kvweld/engine_abi.h), behind the Engine interface. Every failure
// (a missing file or symbol, an ABI version mismatch, a missing required
// function, a capability or fault classes its version cannot have, an
// error code from the plugin) is an Error naming the plugin and what went
// wrong; nothing a plugin returns can crash kvweld.
#pragma once

#include "targets/abi_lists.hpp"
#include "targets/engine.hpp"
#include "kvweld/engine_abi.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvweld::targets {

// Version 15: a table's settings as this host reads them; `faults` and
// `live` are the text lists (api.fault_names, api.live_settings) the rest
// of the host reads, built from them.
struct PluginSettings {
    explicit PluginSettings(const kvweld_engine_api& table);
    bool declared;  // the table describes its settings (params, live, faults) as data, none at all included
    std::string faults, live;
    std::vector<abi::LiveSetting> params;  // each param and the values it takes (none: any)
    // What is wrong with options.params against the declared params ("": nothing, or none declared).
    std::string params_problem(const char* given) const;
};

// The loaded library; unloaded when the last engine using it is gone.
class PluginLibrary {
public:
    static std::shared_ptr<const PluginLibrary> open(const std::string& path);
    ~PluginLibrary();
    PluginLibrary(const PluginLibrary&) = delete;
    PluginLibrary& operator=(const PluginLibrary&) = delete;

    // The plugin's table as this host reads it: copied by the plugin's
    // size (its version's, or from version 14 on its struct_size), the
    // fields past it NULL.
    const kvweld_engine_api& api() const { return api_; }
    const std::string& path() const { return path_; }
    // Which build of the engine this is (ABI 8 `build`; "" when unnamed or older).
    std::string build() const { return api_.build ? api_.build : ""; }
    const PluginSettings& settings() const { return settings_; }

private:
    PluginLibrary(std::string path, void* handle, const kvweld_engine_api& api);
    std::string path_;
    void* handle_;
    kvweld_engine_api api_;
    PluginSettings settings_;
};

// `model` written to a temporary file in `format` ("gguf" or "llama2c"),
// removed again when this goes.
class ModelFile {
public:
    ModelFile(const Model& model, const std::string& format);
    // A LoRA adapter: llama.cpp's adapter GGUF, whatever the model's format.
    explicit ModelFile(const LoraAdapter& adapter);
    ~ModelFile();
    ModelFile(const ModelFile&) = delete;
    ModelFile& operator=(const ModelFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

class PluginEngine final : public Engine {
public:
    // isolated_ms: the engine runs in a process of its own
    // (targets/isolation/), every call answered within that many
    // milliseconds or the process killed; its crash or hang throws Crashed.
    PluginEngine(std::shared_ptr<const PluginLibrary> library, const kvweld_engine_options& options,
                 std::optional<int> isolated_ms = std::nullopt);
    ~PluginEngine() override;
    PluginEngine(const PluginEngine&) = delete;
    PluginEngine& operator=(const PluginEngine&) = delete;

    std::string name() const override { return api_.name; }
    // The declared capabilities; an older table has none of a later version's.
    std::uint32_t capabilities() const override { return api_.capabilities; }
    // Capabilities it declares but the settings it runs under cannot use
    // (EngineEntry::withheld): no op asks for them.
    void withhold(std::uint32_t bits) { api_.capabilities &= ~bits; }
    std::string model_format() const override { return api_.model_format; }
    std::vector<std::string> fault_names() const;  // the switches options.faults may name
    int vocab() const override { return vocab_; }

    using Engine::decode;
    std::vector<float> decode(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens,
                              std::span<const std::uint8_t> outputs) override;
    // Each memory call, to its C function (the members below, through
    // apply_to_members); a white-box call (OpenSized, Migrate) is refused.
    void apply(const MemoryCall& call) override;
    std::vector<std::uint8_t> state_save(int seq) override;
    void state_load(int seq, std::span<const std::uint8_t> bytes) override;
    std::vector<std::uint64_t> storage(int seq, int which, int n_layers) const override;
    void read_kv(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const override;
    std::optional<kvweld_engine_counters> counters() const override;
    std::uint64_t plan_serial(int seq) const override;
    kvweld_pool_info pool_info() const override;
    std::vector<int> block_table(int seq) const override;
    int block_refcount(int block) const override;
    std::string live_settings() const override;
    TwinTolerance twin_tolerance() const override;
    int sampled(int row) const override;
    void set_abort(int after) override;
    int seq_length(int seq) const override;
    std::vector<float> embeddings(int row, int n_embd) const override;

private:
    // The memory calls apply makes, one C function each.
    template <class E>
    friend void apply_to_members(E& e, const MemoryCall& call);
    void open_sized(int seq, int capacity, bool recycle);
    void migrate(int from, int to);
    void open(int seq);
    void close(int seq);
    void truncate(int seq, int n);
    void shift(int seq, int p0, int p1);
    void clear(int seq);
    void keep(int seq);
    void clear_all();
    void copy(int src, int dst);
    void reload(const Model& model);  // written to a ModelFile
    void swap_layer(int seq, int layer);
    void pool_op(int op);
    void set_loras(std::span<const LoraUse> uses);
    void set_cvec(const ControlVector* cvec);
    void set_warmup(bool on);
    void set_live(const std::string& key, const std::string& value);
    void set_sampler(int seq, const SamplerSpec* spec, bool in_place);
    std::string live_settings_taken() const;  // ABI 16: takes_live asked for each listed value
    template <class Fn>
    // `decode`: a decode call, whose KVWELD_ABORTED (ABI 12) throws Aborted.
    void call(const char* what, Fn&& fn, bool decode = false) const;

    std::shared_ptr<const PluginLibrary> library_;
    kvweld_engine_api api_;  // the library's, or its remote table when isolated
    bool isolated_;
    kvweld_engine* engine_ = nullptr;
    int vocab_ = 0;
    std::map<std::uint64_t, std::unique_ptr<ModelFile>> adapter_files_;  // per AdapterId
};

}  // namespace kvweld::targets
