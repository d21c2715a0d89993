// The run's observers (sim/observer.hpp), one class each with its own
// state, in its own file; the simulator registers them in this order:
//
//   Accounting    (oracle_accounting.cpp) the reuse rule's expectation per
//                 call and the engine's counters against it; plan identity
//   Lockstep      (lockstep.cpp, oracle_twin.cpp, oracle_peer.cpp) a second
//                 engine given every call: the twin (reuse off, rows bit for
//                 bit) or kvweld diff's peer (rows within a tolerance, plan
//                 counts call by call)
//   DataShadow    (data_shadow.cpp) the reference's KV per sequence from its
//                 own token history, and every row against it (the data oracle)
//   FreshPrefill  (oracle_fresh.cpp) where the reference cannot follow the
//                 engine: every row against a fresh context's prefill of the
//                 tokens the sequence holds (any architecture)
//   Blindness     (blindness.cpp) white box: decodes no data oracle could judge
//   StorageLedger (oracle_weld.cpp) the storage each slot holds, the weld of
//                 the held plan to it; white box, the storage pinned and its
//                 dead rows poisoned
//   KvOracle      (oracle_kv.cpp) the K/V each decode wrote, read back
//   BlockLedger   (oracle_blocks.cpp) a paged engine's block tables and pool
//                 against the block model the op log implies
//
// Each judges through the Judge and adds its counts to the run's stats.
#pragma once

#include "engine/reference.hpp"
#include "sim/observer.hpp"
#include "sim/run_stats.hpp"
#include "targets/abi_lists.hpp"
#include "targets/block_model.hpp"
#include "targets/reuse_rule.hpp"
#include "targets/white_box.hpp"
#include "util/cat.hpp"
#include "util/overloaded.hpp"

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kvweld::sim {

namespace calls = targets::calls;

// Per batch shape ("4x1": four sequences, one token each; "2x1-5": two,
// one to five tokens): what the engine counted (with or without a rule),
// and the rule's plans and required reuse (0 without one).
struct ShapeStats {
    std::uint64_t calls = 0, reused = 0, built = 0;
    std::uint64_t plans = 0, must_reuse = 0, may_reuse = 0;
};
std::string batch_shape(const std::vector<int>& seqs);
// Two engines' reuse in one class of batch shape (versions: two releases
// at one grid point; diff: an engine and its peer) differs where one reused
// a graph there and the other never did, each over kMinShapeCalls calls or more.
inline constexpr std::uint64_t kMinShapeCalls = 5;
inline bool one_never_reuses(std::uint64_t calls_a, std::uint64_t reused_a, std::uint64_t calls_b,
                             std::uint64_t reused_b) {
    return calls_a >= kMinShapeCalls && calls_b >= kMinShapeCalls && (reused_a > 0) != (reused_b > 0);
}

class Accounting final : public Observer {
public:
    // `rule` nullptr: the engine's counts are added up, nothing judged.
    // `counters` false: nothing is read (an engine without them, or unchecked).
    Accounting(const World& world, Judge& judge, RunStats& stats, std::unique_ptr<targets::ReuseRule> rule,
               bool counters, bool plan_identity);
    const targets::ReuseRule* rule() const { return rule_.get(); }
    const std::map<std::string, ShapeStats>& shapes() const { return shapes_; }

    void before_call(const targets::MemoryCall& call) override;
    void on_call(const targets::MemoryCall& call) override;
    void before_decode(const Batch& b) override;
    void on_decode(Decoded& d) override;
    void after_decode(const Decoded& d) override;
    void on_aborted(const Batch& called, Decoded& kept) override;
    void after_op(OpKind kind) override;

private:
    // The engine's counters (nullopt without), checked against the last
    // read: they never go down, across every op, reloads included.
    std::optional<kvweld_engine_counters> read_counters();
    // A call's counts since before_decode, added to the run's and its shape's.
    struct Counted {
        std::int64_t reused, builds, rebound;
        ShapeStats& shape;
    };
    Counted count_call(const Batch& b);
    void judge_counts(const Batch& b, const Counted& n);  // against expectation_
    void check_plan_identity(const Batch& b, std::int64_t builds);
    void note_plan_serials(const Batch& b);  // a call not judged: its serials are no longer new

    const World& world_;
    Judge& judge_;
    RunStats& stats_;
    void count_terms(const std::vector<std::uint32_t>& changed);
    std::vector<targets::ReuseTerm> terms_;  // the rule's (its reuse condition)
    std::unique_ptr<targets::ReuseRule> rule_;
    bool counters_, plan_identity_;
    std::optional<kvweld_engine_counters> last_, before_;
    std::optional<targets::ReuseExpectation> expectation_;  // the rule's, for the call being judged
    std::set<std::uint64_t> plan_serials_;                  // every plan serial seen this run
    std::map<std::string, ShapeStats> shapes_;
    const Batch* aborted_ = nullptr;  // the call as made, between on_aborted and after_decode
};

// kvweld diff: a call where the engine and its peer prepared their plans
// differently, with the ops just before it.
struct Prepared {
    std::int64_t reused = 0, built = 0, rebound = 0;
    bool operator==(const Prepared&) const = default;
};
struct ReuseDiff {
    std::size_t op_index = 0;
    std::string op;      // its kind (step or steady)
    std::string shape;   // the batch ("4x1": four sequences, one token each)
    Prepared engine, peer;
    std::string before;  // "op 12 shift, op 13 save" (the last ops before this one)
};
// The engine's and the peer's counts for one call, compared each on its
// own: the engine reused more, fewer, or as many but built or rebound
// otherwise (nullopt: they prepared alike).
enum class PreparedDiff : std::uint8_t { reused_more, reused_fewer, otherwise };
std::optional<PreparedDiff> compare_prepared(const Prepared& engine, const Prepared& peer);

class Lockstep final : public Observer {
public:
    enum class Role : std::uint8_t { twin, peer };
    static constexpr std::size_t kMaxReuseDiffs = 64;
    // `peer_counts`: both engines count their plans, so calls are compared.
    Lockstep(const World& world, Judge& judge, RunStats& stats, std::unique_ptr<targets::Engine> second, Role role,
             double peer_tolerance, bool peer_counts);
    Role role() const { return role_; }
    std::string second_live_settings() const { return second_->live_settings(); }
    const std::vector<ReuseDiff>& reuse_diffs() const { return reuse_diffs_; }
    const std::string& ended_early() const { return ended_early_; }

    void on_call(const targets::MemoryCall& call) override;
    void expect_refusal(const std::function<void(targets::Engine&)>& call, const std::string& what) override;
    void expect_refused_load(int seq, int id, const std::string& what) override;
    void before_decode(const Batch& b) override;
    void on_engine_refused(const Batch& b, const Error& e) override;
    void on_decode(Decoded& d) override;
    // ABI 12: the second engine's callback is armed as the engine's was;
    // both must stop in the same call and keep the same positions (the
    // callback is asked as often whatever plan either reused).
    void on_aborted(const Batch& called, Decoded& kept) override;
    void after_op(OpKind kind) override;
    void at_end() override;

    // A refusal of the peer's, named engine B's.
    struct PeerError : Error {
        using Error::Error;
    };

private:
    const char* name() const { return role_ == Role::peer ? "the peer" : "the twin"; }
    // What the second engine is asked; a refusal of the peer's is named
    // engine B's (both engines may share a name).
    template <class F>
    auto on_second(F&& f) -> decltype(f()) {
        if (role_ == Role::twin) return f();
        try {
            return f();
        } catch (const PeerError&) {
            throw;
        } catch (const Error& e) {
            throw PeerError(cat("engine B (", world_.config.engine.peer->engine, "): ", e.what()));
        }
    }
    std::vector<float> decode_second(const Batch& b);  // armed as the engine was; throws Aborted
    void compare_twin(Decoded& d, const std::vector<float>& theirs);
    void compare_sampled(const Decoded& d);
    bool chained(const Pair& pair) const;
    void compare_peer(const Decoded& d, const std::vector<float>& theirs);

    const World& world_;
    Judge& judge_;
    RunStats& stats_;
    std::unique_ptr<targets::Engine> second_;
    Role role_;
    double peer_tolerance_;
    bool peer_counts_;
    std::map<int, std::vector<std::uint8_t>> saved_;  // its own bytes per saved state id
    targets::TwinTolerance twin_tolerance_;  // bit for bit until a state the engine declares one for
    std::optional<kvweld_engine_counters> engine_before_, second_before_;
    std::vector<ReuseDiff> reuse_diffs_;
    std::string ended_early_;
    std::vector<std::pair<std::size_t, OpKind>> recent_ops_;  // the last few ops applied, for ReuseDiff::before
};

// The twin (--twin, oracle_twin.cpp), where the engine names a no-reuse
// setting, and kvweld diff's peer (oracle_peer.cpp); nullptr and the
// report says why where there is none.
std::unique_ptr<Lockstep> open_twin(const World& world, Judge& judge, RunStats& stats, OracleReport& oracles);
// The engine again, on the same model, with its no-reuse setting and the
// fault switches `faults` (nullptr, and `why_not` says why, where it names none).
std::unique_ptr<targets::Engine> open_no_reuse(const World& world, const std::string& faults, std::string& why_not);
std::unique_ptr<Lockstep> open_peer(const World& world, Judge& judge, RunStats& stats, OracleReport& oracles);

class DataShadow final : public Observer {
public:
    // `judging` false: the rows are not checked (unchecked, or settings the
    // reference cannot follow), and the next tokens come from the engine's
    // own rows, or the twin's where there is one.
    DataShadow(const World& world, Judge& judge, RunStats& stats, bool judging);
    const ReferenceKv& shadow(int seq) const { return *shadows_.at(seq); }
    // The calls on_call leaves alone (a rewind, a clear, a keep or a
    // reload leaves rows the refeed overwrites; the rest change no
    // sequence's history); it handles every other.
    using IgnoredCalls = Ignored<calls::Truncate, calls::Clear, calls::Keep, calls::ClearAll, calls::Reload,
                                 calls::SwapLayer, calls::PoolOp, calls::SetLoras, calls::SetCvec, calls::SetWarmup,
                                 calls::LoadRefused, calls::SetSampler>;

    void on_call(const targets::MemoryCall& call) override;
    void on_decode(Decoded& d) override;

private:
    void judge_embeddings(const Pair& pair, std::size_t i, std::size_t n, std::size_t row,
                          const std::vector<float>& want);
    // ABI 11: the row's sampled token against the reference's logits.
    void judge_sampled(const Decoded& d, const Pair& pair, std::size_t i, std::size_t row);

    const World& world_;
    Judge& judge_;
    RunStats& stats_;
    bool judging_;
    bool embeddings_ = false;  // the live setting embeddings=1 is on (ABI 10): each output row's are read back
    abi::Pooling pooling_;     // how the engine makes a row's embeddings (a setting of its, EngineEntry::pooling)
    bool causal_ = true;       // the live setting causal_attn: off, a sequence's tokens of a call attend whole
    // The reference's rows (and hidden states) of a call's pairs, each
    // sequence's pairs as one span (reference_forward_span).
    void reference_rows(const std::vector<Pair>& pairs, bool hidden, std::vector<std::vector<float>>& rows,
                        std::vector<std::vector<float>>& hiddens);
    void pool(const std::vector<Pair>& pairs, std::vector<std::vector<float>>& hidden) const;
    std::map<int, std::unique_ptr<ReferenceKv>> shadows_;  // per open sequence
    std::deque<std::pair<int, ReferenceKv>> saved_;        // per saved state id, as the simulator keeps them
};

class FreshPrefill final : public Observer {
public:
    // `fresh`: the same engine, plan reuse off, no fault switch.
    FreshPrefill(const World& world, Judge& judge, RunStats& stats, std::unique_ptr<targets::Engine> fresh);
    // The calls that change no sequence's tokens and no setting a fresh
    // context needs (white box storage moves, refused loads; a sequence
    // with a sampler chain is judged by the twin, its rows not read).
    using IgnoredCalls = Ignored<calls::SwapLayer, calls::PoolOp, calls::LoadRefused, calls::SetSampler>;

    void on_call(const targets::MemoryCall& call) override;
    void on_decode(Decoded& d) override;

private:
    // What a sequence holds by the simulator's log, and why it cannot be
    // judged ("": it can).
    struct Held {
        std::vector<int> tokens;
        std::string unjudged;
    };
    void judge_span(const Decoded& d, int seq, const std::vector<std::size_t>& at,
                    const std::map<std::size_t, std::size_t>& row_of, bool causal, bool embeddings, std::size_t v);
    std::vector<float> prefill(const std::vector<int>& before, const std::vector<int>& span,
                               const std::vector<std::uint8_t>& outputs, bool causal);

    const World& world_;
    Judge& judge_;
    RunStats& stats_;
    std::unique_ptr<targets::Engine> fresh_;
    std::map<int, Held> held_;                   // per open sequence
    std::deque<std::pair<int, Held>> saved_;     // per saved state id, as the simulator keeps them
    std::map<std::string, std::string> live_;    // the live settings given
    bool lists_causal_;         // the engine lists causal_attn, which the fresh prefill sets per call
    bool fresh_causal_ = true;  // what the fresh engine has now
};
// On where the data oracle is off (nullptr, and the report says why, elsewhere).
std::unique_ptr<FreshPrefill> open_fresh(const World& world, Judge& judge, RunStats& stats, OracleReport& oracles);

class StorageLedger final : public Observer {
public:
    // `rule` (may be nullptr) says which ops may replace storage; `white_box`
    // pins the storage objects themselves; `weld` false: nothing is judged
    // (an engine without storage reports), the pins kept all the same.
    StorageLedger(const World& world, Judge& judge, const targets::ReuseRule* rule, targets::WhiteBox* white_box,
                  std::set<std::uint64_t>& seen_serials, bool weld);
    // White box: the storage the ledger pinned for a slot's layers.
    const std::vector<KvLayer>& pinned(int seq) const { return slots_[std::size_t(seq)].pinned; }
    // The calls under which no storage moves; on_call handles every other.
    using IgnoredCalls = Ignored<calls::Close, calls::SetLoras, calls::SetCvec, calls::SetWarmup, calls::Save,
                                 calls::LoadRefused, calls::SetLive, calls::SetSampler>;

    void on_call(const targets::MemoryCall& call) override;
    void on_decode(Decoded& d) override;

private:
    struct Slot {
        std::vector<std::uint64_t> serials;  // per layer (empty: none accepted yet)
        std::vector<KvLayer> pinned;         // white box: the storage objects themselves
    };
    void after(targets::SeqOp op, int seq, std::optional<int> layer = std::nullopt);
    void pin(int seq, const std::vector<std::uint64_t>& serials);
    // White box: rows [from, capacity) of the pinned storage are dead: NaN,
    // as ASan poisons freed memory, so that a decode that fails to write its
    // row cannot pass for one that wrote the bytes a dead one left there.
    void poison(int seq, int from);

    const World& world_;
    Judge& judge_;
    const targets::ReuseRule* rule_;
    targets::WhiteBox* white_box_;
    std::set<std::uint64_t>& seen_serials_;
    bool weld_;
    std::vector<Slot> slots_;
};

class KvOracle final : public Observer {
public:
    // White box (`ledger` given): reads the storage the ledger pinned, never
    // what the engine reports afterwards; otherwise reads back through the engine.
    KvOracle(const World& world, Judge& judge, RunStats& stats, const DataShadow& shadow, const StorageLedger* ledger);
    void on_decode(Decoded& d) override;

private:
    void read_row(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const;
    const World& world_;
    Judge& judge_;
    RunStats& stats_;
    const DataShadow& shadow_;
    const StorageLedger* ledger_;
};

class Blindness final : public Observer {
public:
    Blindness(const World& world, RunStats& stats, const DataShadow& shadow, const StorageLedger& ledger);
    void before_decode(const Batch& b) override;
    void on_decode(Decoded& d) override;
    void on_aborted(const Batch& called, Decoded& kept) override;

private:
    // What the held plan of a slot was last prepared against (a migrated
    // request lands on a slot whose held plan did not build on its storage:
    // the pins stay with the slot).
    struct PlanPins {
        bool exists = false;
        std::uint64_t model_generation = 0, weights_generation = 0;
        std::vector<KvLayer> storage;  // pinned: what a stale plan would read
    };
    // What a plan that missed a change would leave unseen, measured before
    // the decode and judged once the reference has computed the right rows.
    struct Measure {
        bool change = false;      // the model or the storage changed since the plan was prepared
        bool data_blind = false;  // a stale plan would read exactly what the live storage holds
        bool same_weights = false;
        bool storage_changed = false;
        std::vector<int> layers;  // per layer a stale plan would miss: what the live storage holds
        std::vector<std::vector<float>> key_before, value_before;
    };
    Measure measure(int seq, int pos) const;
    void count(const Measure& m, int seq, int pos);
    void settle(const Batch& b);  // the pending measures counted, the plans' pins moved on

    const World& world_;
    RunStats& stats_;
    const DataShadow& shadow_;
    const StorageLedger& ledger_;
    std::vector<PlanPins> plans_;
    std::vector<std::pair<std::size_t, Measure>> pending_;  // per first pair of each sequence in the call
};

class BlockLedger final : public Observer {
public:
    // `judging` false: the model follows the pool (it paces the traffic's
    // growth) and nothing is checked.
    BlockLedger(const World& world, Judge& judge, targets::BlockModel model, std::set<std::uint64_t>& seen_serials,
                bool judging);
    const targets::BlockModel& model() const { return model_; }
    // The calls that move no block table; on_call handles every other.
    using IgnoredCalls = Ignored<calls::Open, calls::OpenSized, calls::SwapLayer, calls::Migrate, calls::SetLoras,
                                 calls::SetCvec, calls::SetWarmup, calls::Shift, calls::Save, calls::Load,
                                 calls::LoadRefused, calls::SetLive, calls::SetSampler>;

    void on_call(const targets::MemoryCall& call) override;
    void on_decode(Decoded& d) override;
    void after_op(OpKind kind) override;

private:
    void check(bool decoded);
    const World& world_;
    Judge& judge_;
    targets::BlockModel model_;
    std::set<std::uint64_t>& seen_serials_;
    bool judging_;
    std::uint64_t pool_storage_ = 0;  // the pool storage the simulator accepted
    int replacements_ = 0;            // the block model's storage replacements it was accepted at
};

}  // namespace kvweld::sim
