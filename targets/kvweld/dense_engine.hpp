// kvweld's dense engine: one KvCache and one DecodeSession per sequence
// slot. The session belongs to the slot, not to the request: a closed slot
// keeps its held plan (and its storage, for a recycling open), so the next
// request there is decoded by the plan held from the last one, over storage
// it was not built on: the case kvweld exists for. The one implementation
// of the dense design: in process it is the default engine (with the
// white-box capabilities, targets/white_box.hpp); the `kvweld` plugin
// (kvweld_engine_plugin.cpp) is this class behind the C ABI.
//
// Settings ("k=v,..."): policy=rebind|rebuild (what a plan does when its
// storage was replaced; default rebind), backend=cpu|cuda (default cpu),
// reuse=1|0 (0: the twin that builds a plan for every token, to measure
// what a build costs; default 1).
// A context shift rewrites rows in the sequence's own storage and a state
// import writes into it: neither replaces storage, so a held plan stays
// valid (kvweld_rule.cpp, clause 4). Position division (self-extend) is
// not supported: a dense cache's row is its position, and divided
// positions collide.
// Every call runs with the engine's fault switches on; a refused call
// (an Error naming the value and the limit) changes nothing.
#pragma once

#include "engine/decode_session.hpp"
#include "engine/faults.hpp"
#include "engine/model.hpp"
#include "targets/engine.hpp"
#include "engine/recycling_resource.hpp"

#include <map>
#include <memory>
#include <optional>
#include <string>

namespace kvweld::targets {

// The ABI capabilities it declares, in process and as a plugin.
inline constexpr std::uint32_t kDenseCapabilities = KVWELD_CAP_COPY_SEQ | KVWELD_CAP_PLAN_COUNTERS |
                                                    KVWELD_CAP_RELOAD | KVWELD_CAP_STORAGE | KVWELD_CAP_READ_KV |
                                                    KVWELD_CAP_SWAP_LAYER | KVWELD_CAP_PLAN_SERIAL | KVWELD_CAP_LORA |
                                                    KVWELD_CAP_CVEC | KVWELD_CAP_OUTPUTS | KVWELD_CAP_MOE |
                                                    KVWELD_CAP_WARMUP | KVWELD_CAP_SHIFT | KVWELD_CAP_STATE |
                                                    KVWELD_CAP_EMBEDDINGS | KVWELD_CAP_SAMPLERS |
                                                    KVWELD_CAP_ABORT | KVWELD_CAP_KEEP;
// The setting that makes it build a plan for every token (the twin's).
inline constexpr const char* kDenseNoReuse = "reuse=0";

struct DenseSettings {
    RebindPolicy policy = RebindPolicy::rebind;
    Backend backend = Backend::cpu;
    bool reuse = true;
};
// Throws Error naming a setting it does not know or a bad value.
DenseSettings dense_settings(const std::string& params);

class DenseEngine final : public Engine, public WhiteBox {
public:
    // `model` is copied into the engine's own memory, whose addresses are
    // recycled on purpose: a reloaded model lands at its predecessor's
    // address, so a plan keyed by the weights' address is fooled.
    DenseEngine(const Model& model, const EngineSetup& setup, FaultSet faults);

    std::string name() const override { return "kvweld"; }
    std::uint32_t capabilities() const override { return kDenseCapabilities; }
    std::string model_format() const override { return "gguf"; }
    int vocab() const override { return model_->config().vocab; }
    const ModelConfig& config() const { return model_->config(); }
    const FaultSet& faults() const { return faults_; }

    // Each memory call, to the member of that name below (apply_to_members;
    // the kvweld plugin calls those directly, as its C functions).
    void apply(const MemoryCall& call) override;
    void open(int seq);
    void close(int seq);
    using Engine::decode;
    std::vector<float> decode(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens,
                              std::span<const std::uint8_t> outputs) override;
    void truncate(int seq, int n);
    void shift(int seq, int p0, int p1);
    std::vector<std::uint8_t> state_save(int seq) override;
    void state_load(int seq, std::span<const std::uint8_t> bytes) override;
    void clear(int seq);
    void keep(int seq);
    void clear_all();
    void copy(int src, int dst);
    void reload(const Model& model);
    std::vector<std::uint64_t> storage(int seq, int which, int n_layers) const override;
    void read_kv(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const override;
    void swap_layer(int seq, int layer);
    std::optional<kvweld_engine_counters> counters() const override;
    std::uint64_t plan_serial(int seq) const override;
    kvweld_pool_info pool_info() const override;
    std::vector<int> block_table(int seq) const override;
    int block_refcount(int block) const override;
    void pool_op(int op);
    WhiteBox* white_box() override { return this; }

    std::vector<KvLayer> held_layers(int seq) const override;
    // Opens `seq` with `capacity` positions (1..n_ctx): new storage, or with
    // `recycle` the storage the slot kept from its last request, rewound
    // (Error when it kept none or it has another capacity).
    void open_sized(int seq, int capacity, bool recycle);
    // Moves open `from`'s storage to closed `to`, which opens on it; `from` closes with none.
    void migrate(int from, int to);
    void set_loras(std::span<const LoraUse> uses);
    void set_cvec(const ControlVector* cvec);
    void set_warmup(bool on);
    // ABI 9: n_threads, every slot's CPU plan threads (step data: each held
    // plan is kept); ABI 10: embeddings, each output row's hidden state kept
    // for embeddings() (step data too: every plan computes it anyway);
    // causal_attn (CPU only): 0 runs each sequence's tokens of a call as one
    // span attending to itself whole (the mask is step data: plans are kept).
    std::string live_settings() const override;
    void set_live(const std::string& key, const std::string& value);
    std::vector<float> embeddings(int row, int n_embd) const override;
    // ABI 11: a sequence's chain is step data: each output row is sampled
    // with the chain its sequence has at that call, whatever plan is held.
    void set_sampler(int seq, const SamplerSpec* spec, bool in_place);
    int sampled(int row) const override;
    // ABI 12: the abort callback is asked before each token (each token is
    // its own ubatch): the tokens before the stop stay, as llama.h has it.
    void set_abort(int after) override;
    int seq_length(int seq) const override;

private:
    struct Slot {
        explicit Slot(SessionOptions o) : session(o) {}
        std::optional<KvCache> cache;  // kept after close, for a recycling open
        DecodeSession session;         // the slot's held plan, across requests
        bool open = false;
        // Under the sampler_baked fault: the chain its sequence had when
        // the held plan was built, which the plan then samples with.
        std::optional<Sampler> baked;
    };
    int sample_row(int seq, Slot& s, bool built, std::span<const float> row);
    Slot& slot(int seq);  // an open one, else Error
    const Slot& slot(int seq) const;
    KvCache fresh_cache(int capacity) const;
    void require_batch(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens);

    // Declared first, so it outlives the model (see the constructor).
    std::unique_ptr<RecyclingResource> memory_ = std::make_unique<RecyclingResource>();
    std::optional<Model> model_;  // always set; optional so a reload can free it first
    std::uint64_t model_digest_ = 0;  // its weight digest: what a state export names
    EngineSetup setup_;
    SessionOptions session_options_;
    FaultSet faults_;
    std::map<int, Slot> slots_;  // every slot ever opened
    Adapters adapters_;          // every slot decodes with them; a reload keeps them
    bool embeddings_ = false;    // the live setting
    bool causal_ = true;         // the live setting causal_attn (the CPU plan only)
    std::vector<float> embedded_;  // with it on, the last call's output rows' hidden states
    std::map<int, Sampler> samplers_;  // per sequence id, open or not (ABI 11)
    std::vector<int> sampled_;         // the last call's output rows' sampled tokens (-1: none)
    int abort_after_ = -1;             // ABI 12: armed for the next decode call (-1: not)
};

}  // namespace kvweld::targets
