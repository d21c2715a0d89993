// An engine loaded as a plugin through the C ABI (include/kvweld/engine_abi.h).
// Every failure (a missing file or symbol, an ABI version mismatch, a missing
// required function, an error code from the plugin) is an Error naming the
// plugin and what went wrong; nothing a plugin returns can crash kvweld.
#pragma once

#include "kvweld/engine_abi.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvweld::sim {

// The loaded library; unloaded when the last engine using it is gone.
class PluginLibrary {
public:
    static std::shared_ptr<const PluginLibrary> open(const std::string& path);
    ~PluginLibrary();
    PluginLibrary(const PluginLibrary&) = delete;
    PluginLibrary& operator=(const PluginLibrary&) = delete;

    const kvweld_engine_api& api() const { return *api_; }
    const std::string& path() const { return path_; }

private:
    PluginLibrary(std::string path, void* handle, const kvweld_engine_api* api);
    std::string path_;
    void* handle_;
    const kvweld_engine_api* api_;
};

class PluginEngine {
public:
    PluginEngine(std::shared_ptr<const PluginLibrary> library, const kvweld_engine_options& options);
    ~PluginEngine();
    PluginEngine(const PluginEngine&) = delete;
    PluginEngine& operator=(const PluginEngine&) = delete;

    std::string name() const { return library_->api().name; }
    // The declared capabilities; an older table has none of a later version's.
    std::uint32_t capabilities() const { return library_->api().capabilities; }
    std::string model_format() const { return library_->api().model_format; }
    std::vector<std::string> fault_names() const;  // the switches options.faults may name
    int vocab() const { return vocab_; }

    void open(int seq);
    void close(int seq);
    // One row of vocab() logits per (seqs[i], tokens[i]) pair, back to back.
    std::vector<float> decode(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens);
    void truncate(int seq, int n);
    void clear(int seq);
    void clear_all();
    void copy(int src, int dst);                           // needs KVWELD_CAP_COPY_SEQ
    void reload(const std::string& model_path);            // needs KVWELD_CAP_RELOAD
    // needs KVWELD_CAP_STORAGE; which: KVWELD_STORAGE_HELD or _PLAN
    std::vector<std::uint64_t> storage(int seq, int which, int n_layers) const;
    void read_kv(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const;  // KVWELD_CAP_READ_KV
    void swap_layer(int seq, int layer);                   // needs KVWELD_CAP_SWAP_LAYER
    std::optional<kvweld_engine_counters> counters() const;  // nullopt without KVWELD_CAP_PLAN_COUNTERS
    // Paged KV (KVWELD_CAP_BLOCKS, KVWELD_CAP_POOL_OPS).
    kvweld_pool_info pool_info() const;
    std::vector<int> block_table(int seq) const;
    int block_refcount(int block) const;
    void pool_op(int op);  // KVWELD_POOL_COMPACT or KVWELD_POOL_GROW
    std::uint64_t plan_serial(int seq) const;  // needs KVWELD_CAP_PLAN_SERIAL (version 4)

private:
    template <class Fn>
    void call(const char* what, Fn&& fn) const;

    std::shared_ptr<const PluginLibrary> library_;
    kvweld_engine* engine_ = nullptr;
    int vocab_ = 0;
};

}  // namespace kvweld::sim
