// The one simulator: drives any engine through the engine interface
// (targets/engine.hpp: kvweld's in process, or any behind the plugin ABI)
// the way a server does: requests
// are admitted to sequences, prefilled in chunks and decoded with
// speculative drafts in batched steps (continuous batching), rewound,
// preempted, forked and retired. Every row of logits the engine returns is
// checked against kvweld's reference forward over that sequence's own
// history (the data oracle), and every call's plan counters against the
// engine's reuse rule (the accounting oracle, targets/reuse_rule.hpp).
// The next token is chosen from the reference's logits, so what is fed
// never depends on what the engine says. Ops and oracles are switched on
// by the engine's capabilities; with an engine in process, its white box
// (targets/white_box.hpp) too.
#pragma once

#include "engine/adapters.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/model.hpp"
#include "engine/reference.hpp"
#include "util/rng.hpp"
#include "targets/engine.hpp"
#include "targets/block_model.hpp"
#include "targets/reuse_rule.hpp"
#include "sim/sim_config.hpp"
#include "sim/op_table.hpp"
#include "sim/ops.hpp"
#include "sim/verdict.hpp"

#include <array>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::sim {

// reused / (reused + builds + rebinds), 0 when nothing was counted.
inline double counted_reuse_ratio(std::uint64_t reused, std::uint64_t builds, std::uint64_t rebinds) {
    const std::uint64_t all = reused + builds + rebinds;
    return all ? double(reused) / double(all) : 0.0;
}

struct RunStats {
    std::uint64_t ops_run = 0;
    std::uint64_t ops_skipped = 0;  // precondition did not hold (replay of shrunk traces)
    std::array<std::uint64_t, kOpKinds> ops_by_kind{};  // of ops_run
    std::uint64_t requests = 0;
    std::uint64_t calls = 0;        // engine decode calls
    std::uint64_t rows = 0;         // rows of logits decoded (one per token fed)
    std::uint64_t reference_rows = 0;  // of them, checked against the reference (the data oracle)
    std::uint64_t batched_calls = 0;  // calls carrying more than one sequence
    std::uint64_t same_shape_calls = 0;  // calls whose batch is the last call's (same sequences, order and outputs)
    std::uint64_t drafts = 0, rejected = 0;
    std::uint64_t refused = 0;      // invalid calls the engine refused, naming the bad value
    std::uint64_t twin_rows = 0;    // rows compared with the twin's
    std::uint64_t twin_within_tolerance = 0;  // of them, not bitwise equal but within the engine's declared tolerance
    // accounting, over the calls the rule judged
    std::uint64_t plans = 0;       // plans the rule says the calls ran
    std::uint64_t reused = 0;      // reuses the engine counted
    std::uint64_t must_reuse = 0;  // reuses the rule required
    std::uint64_t must_reuse_shared = 0;  // of them, of a plan serving several sequences
    std::uint64_t may_reuse = 0;   // reuses the rule allowed without requiring
    std::uint64_t builds = 0, rebinds = 0;  // what the engine counted besides reuses (with or without a rule)
    // kvweld diff: the peer's counts, its rows compared, and the calls
    // where the two prepared their plans differently: the engine reused more
    // than the peer, fewer, or as many but built and rebound otherwise.
    std::uint64_t peer_reused = 0, peer_builds = 0, peer_rebinds = 0, peer_rows = 0;
    std::uint64_t reuse_more = 0, reuse_fewer = 0, prepared_otherwise = 0;
    double max_peer_error = 0.0;
    // White box, the blind spots: decodes right after a storage or model
    // change (the plan was prepared before it) where a plan that missed the
    // change would give the very same logits (data_blind), and also leave
    // the right K/V rows in the storage the sequence holds (independent_blind:
    // no oracle that reads data could see it). Of those, how many follow a
    // reload of identical weights with the storage untouched, where a missed
    // plan is exactly right and only the accounting oracle can call it missed.
    std::uint64_t change_decodes = 0, data_blind = 0, independent_blind = 0, blind_same_weights_reload = 0;
    double max_logit_error = 0.0;
    double max_kv_error = 0.0;

    double reuse_ratio() const { return plans ? double(reused) / double(plans) : 0.0; }
    // Reuse as the engine counts it, where no rule says how many plans ran.
    double counted_reuse_ratio() const;
    std::uint64_t reuse_diffs() const { return reuse_more + reuse_fewer + prepared_otherwise; }
    double ideal_ratio() const { return plans ? double(must_reuse) / double(plans) : 0.0; }
    void add(const RunStats& o);
};
inline double RunStats::counted_reuse_ratio() const { return kvweld::sim::counted_reuse_ratio(reused, builds, rebinds); }

// Which oracles ran, and why the others could not.
struct OracleReport {
    bool data = true;
    bool accounting = false, weld = false, kv = false, blocks = false;
    bool plan_identity = false;  // part of accounting: counted builds against the plan serial
    // An engine in process (targets/white_box.hpp): pinned storage (kv reads
    // it, dead rows poisoned), blindness counts, capacities, migrate.
    bool white_box = false;
    // The differential twin (--twin): the same engine with plan reuse off,
    // driven in lockstep; every row must equal its row, bit for bit.
    bool twin = false;
    // kvweld diff: every row and every call's plan counts against a peer
    // engine driven in lockstep (the other oracles are off then).
    bool peer = false;
    std::string peer_reuse_why_not;  // why calls' reuse could not be compared ("": it was)
    std::string accounting_why_not, weld_why_not, kv_why_not, blocks_why_not, plan_identity_why_not, data_why_not,
        white_box_why_not, twin_why_not;
    void all_off(const std::string& why);  // an unchecked run
    std::string describe() const;
};

struct Request {
    explicit Request(const ModelConfig& model) : shadow(model) {}
    int capacity = 0;          // positions its sequence holds (n_ctx, or a smaller capacity: white box)
    std::vector<int> history;  // tokens whose K/V the engine holds for this sequence
    std::vector<int> queue;    // tokens to feed next: a prompt's rest, or the pending token
    bool decoding = false;     // queue holds one freshly chosen token: drafts may follow it
    int generated = 0;
    int max_new = 0;
    // The token chosen when the sequence filled its context with output
    // budget left: a context shift makes room and it is fed then.
    std::optional<int> parked;
    ReferenceKv shadow;        // the data oracle's KV, from history alone (and the shifts it was given)
    bool done() const { return queue.empty(); }
};

// What one engine call prepared, by the engine's counters.
struct Prepared {
    std::int64_t reused = 0, built = 0, rebound = 0;
    bool operator==(const Prepared&) const = default;
};

// kvweld diff: a call where the engine and its peer prepared their plans
// differently, with the ops just before it.
struct ReuseDiff {
    std::size_t op_index = 0;
    std::string op;      // its kind (step or steady)
    std::string shape;   // the batch ("4x1": four sequences, one token each)
    Prepared engine, peer;
    std::string before;  // "op 12 shift, op 13 save" (the last ops before this one)
};

// A saved sequence state (OpKind::save): the bytes the engine (and its
// twin or peer) gave, and the request as the simulator had it then.
struct SavedState {
    std::vector<std::uint8_t> bytes, second_bytes;
    Request request;
    std::uint64_t weights_generation = 0;  // the weights it was saved under
    int id = 0;                            // its serial in the run (the rule's name for it)
};

// The ledger's entry for one sequence slot: the storage the simulator
// accepted it holds (kept across requests: a slot may keep its storage).
struct SlotLedger {
    std::vector<std::uint64_t> serials;  // per layer (empty: none accepted yet)
    std::vector<KvLayer> pinned;         // white box: the storage objects themselves
    int kept_capacity = 0;               // white box: the storage the slot kept when its request left (0: none)
};

// White box: what a slot's held plan was last prepared against, in the
// simulator's own terms (for the blindness counts).
struct PlanPins {
    bool exists = false;
    std::uint64_t model_generation = 0, weights_generation = 0;
    std::vector<KvLayer> storage;  // pinned: what a stale plan would read
};

// Per batch shape ("4x1": four sequences, one token each; "2x1-5": two,
// one to five tokens), what the rule required and what the engine did.
struct ShapeStats {
    std::uint64_t calls = 0, plans = 0, must_reuse = 0, may_reuse = 0, reused = 0;
};

// "4x1": four sequences, one token each; "2x1-5": two, one to five tokens.
std::string batch_shape(const std::vector<int>& seqs);

class Simulator {
public:
    // Creates the engine (throws Error if it cannot: a broken plugin, a bad
    // setting). Unchecked (--no-oracles): no reference and no oracle, the
    // next token chosen from the engine's own logits, to measure what the
    // checks cost.
    explicit Simulator(const SimConfig& config, bool checked = true);

    bool apply(const Op& op, std::size_t op_index);  // false: the run failed (see failure())

    // Sequences an op of this kind may act on now (the op table's rule,
    // sim/op_table.hpp: the generator and the replay use the same).
    std::vector<int> eligible(OpKind kind) const;
    std::vector<int> free_seqs() const;
    // What the op table's eligibility reads besides the requests.
    bool white_box() const { return white_box_ != nullptr; }
    std::size_t saved_states() const { return saved_.size(); }
    kvweld_pool_info pool_info() const { return engine_->pool_info(); }

    const SimConfig& config() const { return config_; }
    const RunStats& stats() const { return stats_; }
    const OracleReport& oracles() const { return oracles_; }
    Verdict verdict() const { return verdict_; }
    const std::optional<Failure>& failure() const { return failure_; }
    // kvweld diff: the calls that prepared differently (the first kMaxReuseDiffs).
    const std::vector<ReuseDiff>& reuse_diffs() const { return reuse_diffs_; }
    // kvweld diff: why the run ended before its last op with no difference
    // (both engines refused the same call), "" when it did not.
    const std::string& ended_early() const { return ended_early_; }
    static constexpr std::size_t kMaxReuseDiffs = 64;
    // The run is over: a diff whose rows agreed but whose reuse did not ends
    // with reuse_differs, at the first such call.
    void end();
    std::string engine_name() const { return engine_->name(); }
    std::uint32_t capabilities() const { return engine_->capabilities(); }
    const std::optional<Request>& request(int seq) const { return requests_[std::size_t(seq)]; }
    // Measured, so never part of a report that must replay byte for byte.
    double decode_seconds() const { return decode_seconds_; }
    const std::map<std::string, ShapeStats>& shapes() const { return shapes_; }
    // Paged engines with a block model: the pool the op log implies (nullptr otherwise).
    const BlockModel* block_model() const { return blocks_ ? &*blocks_ : nullptr; }

private:
    // A violation ends the run: thrown from deep in an op, caught in apply().
    struct Stop {};
    struct Pair {
        int seq;
        int token;
        int pos;
        bool output = true;  // its logits are asked for (a prefill chunk may want its last row only)
    };
    // The pairs' output flags for Engine::decode (empty: every pair's).
    static std::vector<std::uint8_t> output_flags(const std::vector<Pair>& pairs);
    // Each op kind's effect, one overload per kind (sim/ops.hpp): the
    // engine calls, the simulator's own account and the models that follow
    // it. `seq` is the eligible sequence the op's pick chose (0 for an op
    // that picks none). A step or a steady phase returns whether any
    // sequence fed a token.
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
    // The invalid calls (one table, invalid_ops.cpp): each must be refused
    // with an error naming the bad value, and must change nothing.
    void run(const ops::Invalid& op, int seq);
    void run(const ops::Migrate& op, int from);
    void run(const ops::Lora& op, int seq);  // white box: the adapters the engine and the reference run with
    void run(const ops::Cvec& op, int seq);
    void run(const ops::Warmup& op, int seq);
    // Context shifts, state save and load, steady phases (sequence_state.cpp).
    void run(const ops::Shift& op, int seq);
    void run(const ops::Save& op, int seq);
    void run(const ops::Load& op, int seq);
    bool run(const ops::Steady& op, int seq);
    int fork_destination(const ops::Fork& op, int src) const;
    void shift_once(int seq, int p0, int p1);
    void open_twin();  // --twin, where the engine names a no-reuse setting
    void open_peer();  // kvweld diff: the peer engine, the run's only oracle
    // White box: rows [from, to) of the sequence's pinned storage are dead
    // (truncated away): NaN, as ASan poisons freed memory, so that a decode
    // that fails to write its row cannot pass for one that wrote the bytes a
    // truncated-away decode left there.
    void poison(int seq, int from, int to);
    // The engine's truncate after a step's rejected drafts (the scheduler's
    // spec_reject_off_by_one fault keeps one rejected row).
    void truncate_rejected(int seq, int n);

    // White box: the blindness counts (blindness.cpp). What a plan that
    // missed this change would leave unseen, measured before the decode and
    // judged once the reference has computed the right rows.
    struct Blindness {
        bool change = false;      // the model or the storage changed since the plan was prepared
        bool data_blind = false;  // a stale plan would read exactly what the live storage holds
        bool same_weights = false;
        bool storage_changed = false;
        // Per layer whose storage a stale plan would miss: what the live
        // storage holds at the decoded position before the decode.
        std::vector<int> layers;
        std::vector<std::vector<float>> key_before, value_before;
    };
    Blindness blindness_before(int seq, int pos) const;
    void count_blindness(const Blindness& b, int seq, int pos);
    void pin_plan(int seq);

    // The oracles, one file each (oracle_*.cpp). Data: the rows against the
    // reference (returns the rows the next tokens are chosen from). The
    // ledger and weld, for engines that report storage; kv, for engines
    // that read back KV rows; the block ledger and pool weld, for paged
    // engines with a block model (`decoded`: right after a decode call).
    // Where the reference cannot follow the engine (data off), the next
    // tokens come from `got` itself: the twin's rows when there is one.
    std::vector<std::vector<float>> check_data(const std::vector<Pair>& pairs, const std::vector<float>& got);
    void ledger_after(SeqOp op, int seq, std::optional<int> layer = std::nullopt);
    void pin(int seq, const std::vector<std::uint64_t>& serials);
    void check_weld(const std::vector<Pair>& pairs);
    void check_kv(const std::vector<Pair>& pairs);
    // One K/V row: read back through the engine, or white box, from the pinned storage.
    void read_row(int seq, int layer, int pos, std::span<float> k, std::span<float> v) const;
    void check_blocks(bool decoded);
    // The twin oracle (oracle_twin.cpp): the twin decodes the same pairs; each row must be the engine's.
    // Returns the twin's rows (empty without a twin).
    std::vector<float> check_twin(const std::vector<Pair>& pairs, const std::vector<float>& got);
    // The peer oracle (oracle_peer.cpp): the peer decodes the same pairs;
    // its rows must lie within the tolerance of the engine's, and a call
    // whose counters differ from the engine's is recorded (`before`: the
    // engine's counters before the call).
    void check_peer(const std::vector<Pair>& pairs, const std::vector<float>& got,
                    const std::optional<kvweld_engine_counters>& before);
    // kvweld diff: engine A's decode; where A refuses it, the peer is asked
    // the same, and if it refuses too the run ends there with no
    // difference (ended_early() says why); a refusal of A's alone is one.
    std::vector<float> decode_or_both_refuse(std::span<const std::int32_t> seqs, std::span<const std::int32_t> tokens,
                                             std::span<const std::uint8_t> outputs);
    // "the twin" or "the peer": the engine in lockstep, in messages.
    const char* second_name() const { return peer_ ? "the peer" : "the twin"; }
    // Every memory op goes to the engine and, where there is one, to its twin or peer.
    template <class Op>
    void both(Op&& op) {
        op(*engine_);
        if (second_) on_second([&] { op(*second_); });
    }
    // What the twin or peer is asked; kvweld diff names a refusal of the
    // peer's as engine B's (both engines may share a name).
    struct PeerError : Error {
        using Error::Error;
    };
    template <class F>
    auto on_second(F&& f) -> decltype(f()) {
        if (!peer_) return f();
        try {
            return f();
        } catch (const PeerError&) {
            throw;
        } catch (const Error& e) {
            throw PeerError(cat("engine B (", config_.engine.peer->engine, "): ", e.what()));
        }
    }
    void requeue_from(Request& r, std::size_t n);  // history[n:] goes back to the queue
    void requeue_all(SeqOp op);                         // every sequence emptied by `op` re-prefills
    // A rewrite: the first `n` queued tokens (the ones fed again) each become another token.
    void rewrite_requeued(const ops::Rewrite& rewrite, Request& r, std::size_t n) const;

    // One engine call, every row checked; returns the reference's logits per pair.
    std::vector<std::vector<float>> checked_decode(const std::vector<Pair>& pairs);
    void check_accounting(const std::vector<Pair>& pairs, const std::optional<kvweld_engine_counters>& before);
    // The reuse rule's contract clause for the call being judged ("" when it
    // names none): a stale row on a call the clause decided carries it too.
    std::string call_clause() const { return expectation_ && expectation_->clause ? expectation_->clause : ""; }
    // The engine's counters (nullopt without a rule), checked against the
    // last read: they never go down, across every op, reloads included.
    std::optional<kvweld_engine_counters> read_counters();
    // The plan identity (KVWELD_CAP_PLAN_SERIAL): after a call, each plan
    // serial first seen on one of its sequences needs a build the call
    // counted, and a call that counts builds must show a new serial.
    void check_plan_identity(const std::vector<Pair>& pairs, std::int64_t builds);
    void record(Verdict v, Oracle o, std::string detail, std::string clause = {});
    // record, then end the op (throws Stop)
    void fail(Verdict v, Oracle o, std::string detail, std::string clause = {});

    SimConfig config_;
    Model model_;
    std::uint64_t weights_seed_;
    // White box: the run's LoRA adapters (kLoraPool, from the weights seed)
    // and the adapter state the simulator gave the engine: the reference runs with it.
    std::vector<std::shared_ptr<const LoraAdapter>> lora_pool_;
    Adapters adapters_;
    std::unique_ptr<Engine> engine_;
    // The engine driven in lockstep: the twin (--twin: the same engine, plan
    // reuse off) or, with peer_, kvweld diff's peer engine.
    std::unique_ptr<Engine> second_;
    bool peer_ = false;
    bool counters_ = false;  // the engine's counters are read (checked runs of engines that declare them)
    std::vector<ReuseDiff> reuse_diffs_;
    std::string ended_early_;
    std::vector<std::pair<std::size_t, OpKind>> recent_ops_;  // the last few ops applied, for ReuseDiff::before
    TwinTolerance twin_tolerance_;  // bit for bit until a state the engine declares one for
    std::unique_ptr<ReuseRule> rule_;
    OracleReport oracles_;
    std::vector<std::optional<Request>> requests_;  // per sequence id
    std::set<std::uint64_t> seen_serials_;               // every storage serial accepted this run
    std::optional<kvweld_engine_counters> last_counters_;  // the last counters read
    std::optional<targets::ReuseExpectation> expectation_;  // the rule's, for the call being judged
    const char* standing_ = nullptr;  // the rule's standing clause for the decode in flight
    std::vector<std::int32_t> last_batch_;  // the last call's sequence per pair, -1 marking a pair without output
    std::set<std::uint64_t> plan_serials_;               // every plan serial seen this run
    WhiteBox* white_box_ = nullptr;                      // an engine in process: its white-box capabilities
    bool spec_reject_fault_ = false;                     // the scheduler's fault switch (white box)
    std::vector<SlotLedger> ledger_;                     // per sequence slot
    std::vector<PlanPins> plans_;                        // white box: per sequence slot
    std::vector<SavedState> saved_;                      // the states saved (at most kSavedStates, oldest first)
    int states_saved_ = 0;
    std::uint64_t model_generation_ = 1, weights_generation_ = 1;
    std::optional<BlockModel> blocks_;                   // paged engines: the block ownership the op log implies
    std::uint64_t pool_storage_ = 0;                     // the pool storage the simulator accepted
    int pool_replacements_ = 0;                          // the block model's storage replacements it was accepted at
    RunStats stats_;
    std::map<std::string, ShapeStats> shapes_;
    double decode_seconds_ = 0.0;
    Verdict verdict_ = Verdict::pass;
    std::optional<Failure> failure_;
    std::size_t op_index_ = 0;
    OpKind op_kind_ = OpKind::step;
};

}  // namespace kvweld::sim
