// The one simulator: drives any engine through the engine interface
// (targets/engine.hpp: kvweld's in process, or any behind the plugin ABI)
// the way a server does: requests are admitted to sequences, prefilled in
// chunks and decoded with speculative drafts in batched steps (continuous
// batching), rewound, preempted, forked and retired. The simulator drives;
// observers check (sim/observer.hpp): every memory call and decode it
// makes is published to the run's oracles and models (sim/observers.hpp),
// each with its own state, switched on by the engine's capabilities (with
// an engine in process, its white box too). The next token is chosen from
// the reference's logits (the data shadow's), so what is fed never depends
// on what the engine says.
#pragma once

#include "engine/adapters.hpp"
#include "engine/model.hpp"
#include "sim/observer.hpp"
#include "sim/observers.hpp"
#include "sim/op_table.hpp"
#include "sim/ops.hpp"
#include "sim/run_stats.hpp"
#include "sim/sim_config.hpp"
#include "sim/verdict.hpp"
#include "targets/abi_lists.hpp"
#include "targets/engine.hpp"
#include "util/cat.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvweld::sim {

// A saved sequence state (ops::Save): the bytes the engine gave (each
// observer with an engine of its own keeps its own), and the request as
// the simulator had it then.
struct SavedState {
    std::vector<std::uint8_t> bytes;
    Request request;
    std::uint64_t weights_seed = 0;  // the weights it was saved under
    int id = 0;                      // its serial in the run (the rule's name for it)
};

class Simulator {
public:
    // Creates the engine (throws Error if it cannot: a broken plugin, a bad
    // setting). Unchecked (--no-oracles): no reference and no oracle, the
    // next token chosen from the engine's own logits, to measure what the
    // checks cost.
    explicit Simulator(const SimConfig& config, bool checked = true);
    Simulator(const Simulator&) = delete;
    Simulator& operator=(const Simulator&) = delete;

    bool apply(const Op& op, std::size_t op_index);  // false: the run failed (see failure())

    // Sequences an op of this kind may act on now (the op table's rule,
    // sim/op_table.hpp: the generator and the replay use the same).
    std::vector<int> eligible(OpKind kind) const;
    std::vector<int> free_seqs() const;
    // What the op table's eligibility reads besides the requests.
    bool white_box() const { return white_box_ != nullptr; }
    std::size_t saved_states() const { return saved_.size(); }
    kvweld_pool_info pool_info() const { return engine_->pool_info(); }
    // ABI 9: the live settings the engine lists (with a peer, those both list, at values both list).
    const std::vector<abi::LiveSetting>& live_settings() const { return live_; }

    const SimConfig& config() const { return config_; }
    const RunStats& stats() const { return stats_; }
    const OracleReport& oracles() const { return oracles_; }
    Verdict verdict() const { return judge_.verdict(); }
    const std::optional<Failure>& failure() const { return judge_.failure(); }
    // kvweld diff: the calls that prepared differently (the first Lockstep::kMaxReuseDiffs).
    const std::vector<ReuseDiff>& reuse_diffs() const;
    // kvweld diff: why the run ended before its last op with no difference
    // (both engines refused the same call), "" when it did not.
    const std::string& ended_early() const;
    // The run is over (a diff whose rows agreed but whose plans did not ends
    // with reuse_differs, at the first such call).
    void end();
    std::string engine_name() const { return engine_->name(); }
    std::uint32_t capabilities() const { return engine_->capabilities(); }
    const std::optional<Request>& request(int seq) const { return requests_[std::size_t(seq)]; }
    // Measured, so never part of a report that must replay byte for byte.
    double decode_seconds() const { return decode_seconds_; }
    const std::map<std::string, ShapeStats>& shapes() const;
    // Paged engines with a block model: the pool the op log implies (nullptr otherwise).
    const targets::BlockModel* block_model() const { return blocks_ ? &blocks_->model() : nullptr; }

    // For tests and tools: one more observer, told just before the first
    // of type Before (after every other where there is none); and the
    // simulator's own account it may read.
    template <class Before>
    void insert_observer(std::unique_ptr<Observer> o) {
        const auto at = std::find_if(observers_.begin(), observers_.end(),
                                     [](const auto& x) { return dynamic_cast<const Before*>(x.get()) != nullptr; });
        observers_.insert(at, std::move(o));
    }
    const World& world() const { return world_; }
    // For the harness's self-test: the first observer of type O stops
    // hearing calls of kind `call` (an index in MemoryCall); false where
    // no such observer runs.
    template <class O>
    bool drop_handling(int call) {
        for (const auto& o : observers_)
            if (dynamic_cast<O*>(o.get())) return o->dropped_call = call, true;
        return false;
    }

private:
    void open_observers(bool checked);

    // Each op kind's effect, one overload per kind, each defined in its
    // kind's file (sim/ops/<name>.cpp): the engine calls and the simulator's
    // own account. `seq` is the eligible sequence the op's pick chose (0 for
    // an op that picks none). A step or a steady phase returns whether any
    // sequence fed a token. The invalid op's calls must each be refused with
    // an error naming the bad value, and must change nothing.
    void run(const ops::Admit& op, int seq);
    bool run(const ops::Step& op, int seq);
    void run(const ops::Truncate& op, int seq);
    void run(const ops::Preempt& op, int seq);
    void run(const ops::Fork& op, int src);
    void run(const ops::Retire& op, int seq);
    void run(const ops::ClearAll& op, int seq);
    void run(const ops::Reload& op, int seq);  // the reference takes the same weights
    void run(const ops::SwapLayer& op, int seq);
    void run(const ops::Compact& op, int seq);
    void run(const ops::Grow& op, int seq);
    void run(const ops::Reset& op, int seq);
    void run(const ops::Invalid& op, int seq);
    void run(const ops::Migrate& op, int from);
    void run(const ops::Lora& op, int seq);  // the adapters the engine and the reference run with
    void run(const ops::Cvec& op, int seq);
    void run(const ops::Warmup& op, int seq);
    void run(const ops::Shift& op, int seq);
    void run(const ops::Save& op, int seq);
    void run(const ops::Load& op, int seq);
    bool run(const ops::Steady& op, int seq);
    void run(const ops::Live& op, int seq);
    void run(const ops::SetSampler& op, int seq);
    void run(const ops::Abort& op, int seq);  // armed for the next decode call
    void run(const ops::Keep& op, int seq);
    // An argument variant of `op` took effect (RunStats::variants).
    template <class T>
    void drew(const T&, std::type_identity_t<Variant<T>> v) {
        ++stats_.variants[cat(T::name, ".", T::variants[v.index])];
    }
    int fork_destination(const ops::Fork& op, int src) const;
    bool shift_once(int seq, int p0, int p1);  // false: the memory refused it (make_refusable)

    // A memory call: made of the engine (every observer told before it, a
    // refusal carrying the rule's standing clause), then, once the
    // simulator's own account follows it, published to every observer.
    void make(const targets::MemoryCall& call);
    void publish(const targets::MemoryCall& call);
    // One engine call over `pairs`, every row checked: the reference's
    // logits per pair (what the next tokens are chosen from); or, where the
    // armed abort callback stopped it, each called sequence's length as the
    // engine kept it.
    struct Decoding {
        std::vector<std::vector<float>> want;
        std::optional<std::map<int, int>> kept;
    };
    Decoding decode(std::vector<Pair> pairs);
    // ABI 12: after an aborted call, every open sequence's length read back
    // and held to llama.h's contract (each kept a prefix of what it was
    // fed, nothing held before is lost): the called sequences' lengths.
    std::map<int, int> kept_after_abort(const Batch& called);
    std::map<int, int> aborted(const Batch& called);
    // A sequence's share of an aborted call (its `first` pair in `pairs`):
    // the tokens the simulator takes as fed, the rest cut back.
    void adopt_kept(int seq, bool prefill, int length, const std::vector<Pair>& pairs, std::size_t first);

    void requeue_from(Request& r, std::size_t n);  // history[n:] goes back to the queue
    void requeue_all();                            // every open sequence re-prefills
    // A rewrite: the first `n` queued tokens (the ones fed again) each become another token.
    void rewrite_requeued(const ops::Rewrite& rewrite, Request& r, std::size_t n) const;
    // The engine's truncate after a step's rejected drafts (the scheduler's
    // spec_reject_off_by_one fault keeps one rejected row).
    void truncate_rejected(int seq, int n);
    // Makes a call the engine's memory may refuse (targets/registry.hpp
    // may_refuse: a recurrent state asked to drop a suffix): false where it
    // did, naming the position; the twin must refuse it too, and nothing changes.
    bool make_refusable(const targets::MemoryCall& call);
    void reprefill(int seq);  // after a refused rewind: emptied, and its history fed again

    SimConfig config_;
    Model model_;
    std::uint64_t weights_seed_;
    std::uint64_t model_generation_ = 1, weights_generation_ = 1;
    // The run's LoRA adapters (kLoraPool, from the weights seed) and the
    // adapter state the simulator gave the engine: the reference runs with it.
    std::vector<std::shared_ptr<const LoraAdapter>> lora_pool_;
    Adapters adapters_;
    std::unique_ptr<targets::Engine> engine_;
    targets::WhiteBox* white_box_ = nullptr;  // an engine in process: its white-box capabilities
    bool spec_reject_fault_ = false;          // the scheduler's fault switch (white box)
    std::vector<std::optional<Request>> requests_;  // per sequence id
    std::vector<abi::LiveSetting> live_;
    std::map<int, SamplerSpec> samplers_;  // ABI 11: each sequence id's chain, as given
    std::optional<std::uint32_t> abort_armed_;  // ABI 12: the abort callback's `after` for the next decode call
    std::vector<int> kept_capacity_;  // white box, per slot: the storage it kept when its request left (0: none)
    std::vector<SavedState> saved_;   // the states saved (at most kSavedStates, oldest first)
    int states_saved_ = 0;
    std::vector<std::int32_t> last_batch_;  // the last call's sequence per pair, -1 marking a pair without output
    RunStats stats_;
    double decode_seconds_ = 0.0;
    OracleReport oracles_;
    Judge judge_;
    World world_;
    // The observers, in the order they are told; typed pointers to the ones
    // whose state the simulator reads back.
    std::set<std::uint64_t> seen_serials_;  // every storage serial the ledgers accepted this run
    std::vector<std::unique_ptr<Observer>> observers_;
    Accounting* accounting_ = nullptr;
    Lockstep* lockstep_ = nullptr;
    BlockLedger* blocks_ = nullptr;
};

}  // namespace kvweld::sim
