// The simulated server: a pool of slots, each holding a KvCache and a
// DecodeSession, driven one op at a time. Every decode passes through the
// oracles (data, kv content, weld, accounting); the first violation stops
// the run. What each oracle trusts is said in oracles.cpp.
#pragma once

#include "engine/decode_session.hpp"
#include "engine/reference.hpp"
#include "engine/rng.hpp"
#include "sim/ledger.hpp"
#include "sim/ops.hpp"
#include "sim/sim_config.hpp"
#include "sim/stats.hpp"
#include "sim/verdict.hpp"

#include "engine/recycling_resource.hpp"

#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace kvweld::sim {

struct OracleSwitches {
    bool data = true;
    bool kv = true;
    bool weld = true;
    bool accounting = true;
    static OracleSwitches none() { return {false, false, false, false}; }
};

// A cache plus what the simulator's own op log says about it: its storage
// generation (the simulator's counter, never the engine's KvAllocId) and
// the storage the ledger (sim/ledger.hpp) says it holds.
struct TrackedCache {
    KvCache cache;
    std::uint64_t generation = 0;
    LedgerEntry ledger;
};

struct Request {
    std::vector<int> history;  // tokens whose K/V the cache holds
    int pending = 0;           // the next token to feed
    float accept = 0.0f;
    std::size_t max_len = 0;   // history length at which the output budget is spent
    std::unique_ptr<ReferenceKv> shadow;  // the data oracle's KV, from history alone
};

// The simulator's model of a slot's held plan: what it was last built or
// rebound against, in the simulator's own terms.
struct PlanModel {
    bool exists = false;
    std::uint64_t model_generation = 0;
    std::uint64_t weights_generation = 0;
    std::uint64_t cache_generation = 0;
    int capacity = 0;              // the cache's max_seq_len: a rebind cannot change it
    std::vector<KvLayer> storage;  // pinned, to measure what a stale plan would read
};

struct Slot {
    std::optional<TrackedCache> cache;
    std::optional<Request> request;
    DecodeSession session;
    PlanModel plan;
};

class Simulator {
public:
    explicit Simulator(const SimConfig& config, OracleSwitches oracles = {});

    // Runs one op. Returns false when an op fails (see failure()); an op
    // whose precondition does not hold is skipped and counted.
    bool apply(const Op& op, std::size_t op_index);

    // Slots an op of this kind may act on now (generation and execution use
    // the same rule). `room` is the decode positions it needs.
    std::vector<int> eligible(OpKind kind, int room = 1) const;
    std::vector<int> free_slots() const;
    const Slot& slot(int i) const { return slots_[static_cast<std::size_t>(i)]; }

    const SimConfig& config() const { return config_; }
    const RunStats& stats() const { return stats_; }
    const std::optional<Failure>& failure() const { return failure_; }
    Verdict verdict() const { return verdict_; }

private:
    // ops
    void admit(const Op& op, int s);
    void decode_op(const Op& op, int s);
    void spec(const Op& op, int s);
    void retire(int s);
    void clear(int s);
    void set_layer(const Op& op, int s);
    void truncate(const Op& op, int s);
    void reload(const Op& op);
    void migrate(int from, int to);
    void prefill(int s, const std::vector<int>& tokens, Rng& chooser);

    // One checked decode: feeds `token` to slot s and runs every oracle.
    // Returns the chosen next token; throws Stop on a violation.
    int checked_decode(int s, int token, Rng& chooser);
    void check_data(int s, int token, std::span<const float> logits, std::span<const float> want);
    void check_kv(int s, int pos);
    void check_weld(int s);
    void check_plan_identity(int s, const SessionCounters& before, PlanSerial before_serial);
    void check_accounting(int s, const SessionCounters& before, bool justified_build,
                          bool justified_rebind);
    void check_invariants(int s) const;
    bool storage_indistinguishable(const Slot& slot, int pos) const;
    struct Blindness;
    Blindness blindness_before(const Slot& slot, int pos, bool model_changed, bool cache_changed) const;
    void count_blindness(const Blindness& b, const Request& r, int pos);
    void update_plan_model(Slot& slot);
    int choose(std::span<const float> logits, Rng& chooser) const;
    void fail(Verdict v, Oracle o, std::string detail);
    TrackedCache new_cache(int capacity);
    void record_replaced_storage(TrackedCache& c);
    void truncate_cache(TrackedCache& c, int n);  // truncate_to(n), dead rows poisoned
    int capacity_for(const Op& op) const;

    SimConfig config_;
    OracleSwitches oracles_;
    RecyclingResource pool_;  // recycles weight addresses on purpose
    StorageLedger ledger_;
    std::set<PlanSerial> plan_serials_;  // every plan identity this run has seen
    std::optional<Model> model_;
    std::uint64_t model_generation_ = 1;
    std::uint64_t weights_generation_ = 1;
    std::uint64_t weights_seed_ = 0;
    std::uint64_t cache_generations_ = 0;
    std::vector<Slot> slots_;
    RunStats stats_;
    Verdict verdict_ = Verdict::pass;
    std::optional<Failure> failure_;
    std::size_t op_index_ = 0;
    OpKind op_kind_ = OpKind::decode;
};

}  // namespace kvweld::sim
