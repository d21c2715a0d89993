// The simulator drives, observers check (TigerBeetle's VOPR is the model:
// one simulator over the system under test, each checker a struct with its
// own state). Applying an op makes the engine calls and publishes each one,
// with its arguments and what the engine returned, to the run's observers
// in registration order; each oracle and model (sim/observers.hpp) keeps its
// own state and judges through the run's Judge. Adding an oracle is a class
// in its own file, its entry in Oracles (sim/run_stats.hpp: whether it runs,
// and why not) and its construction in Simulator::open_observers; an oracle
// that needs to see a call overrides its hook instead of the op calling it.
#pragma once

#include "sim/ops.hpp"
#include "sim/sim_config.hpp"
#include "sim/verdict.hpp"
#include "targets/engine.hpp"
#include "targets/memory_call.hpp"
#include "util/error.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::sim {

// A request as the simulator has it: the tokens whose K/V the engine holds
// and the ones it feeds next. The reference's view of the same tokens is
// the data shadow's (DataShadow).
struct Request {
    int capacity = 0;          // positions its sequence holds (n_ctx, or a smaller capacity: white box)
    std::vector<int> history;  // tokens whose K/V the engine holds for this sequence
    std::vector<int> queue;    // tokens to feed next: a prompt's rest, or the pending token
    bool decoding = false;     // queue holds one freshly chosen token: drafts may follow it
    int generated = 0;
    int max_new = 0;
    // The token chosen when the sequence filled its context with output
    // budget left: a context shift makes room and it is fed then.
    std::optional<int> parked;
    bool done() const { return queue.empty(); }
};

// One token of a decode call.
struct Pair {
    int seq;
    int token;
    int pos;
    bool output = true;  // its logits are asked for (a prefill chunk may want its last row only)
};

// One decode call, as the engine is given it.
struct Batch {
    std::vector<Pair> pairs;
    std::vector<std::int32_t> seqs, tokens;
    std::vector<std::uint8_t> outputs;  // empty: every pair's row
    int abort_after = -1;  // ABI 12: the abort callback armed for this call (-1: none)
    explicit Batch(std::vector<Pair> p);
};
// ABI 12: per sequence of an aborted call, the positions it holds after it
// (`kept`: the pairs the engine kept of `called`).
std::map<int, int> kept_lengths(const Batch& called, const Batch& kept);

// What the engine returned for a batch, and what observers add for later
// ones: the twin's rows (the lockstep), the reference's (the data shadow),
// which the next tokens are chosen from.
struct Decoded {
    const Batch& batch;
    const std::vector<float>& got;  // the output pairs' rows, back to back
    // ABI 11: the engine's sampled token per output row (-1: none), read
    // after the call; empty for an engine without samplers. A row whose
    // sequence has a chain is judged by its token, not its logits (the
    // engine may leave them unfilled).
    std::vector<int> sampled;
    std::vector<float> twin_rows;   // empty without a twin
    std::vector<std::vector<float>> want;  // per pair (empty for a pair without output where no reference ran)
};

// The simulator's own account, read by observers: never what the engine
// reports. References into the simulator, valid for the run.
struct World {
    const SimConfig& config;
    const Model& model;  // the weights the engine was last given
    const Adapters& adapters;
    const std::vector<std::optional<Request>>& requests;
    const std::uint64_t& model_generation;    // +1 per reload
    const std::uint64_t& weights_generation;  // +1 per reload with new weights
    targets::Engine& engine;
    // ABI 11: the sampler chain the simulator gave each sequence id.
    const std::map<int, SamplerSpec>& samplers;
    bool open(int seq) const { return requests[std::size_t(seq)].has_value(); }
};

// The run's verdict: the first violation ends the op that found it (fail
// throws Stop) and the run. Where the reuse rule named a clause for the
// call being judged, a failure carries it too (sim/known_findings.hpp).
class Judge {
public:
    struct Stop {};
    void begin_op(std::size_t index, OpKind kind) {
        op_index_ = index;
        op_kind_ = kind;
    }
    void record(Verdict v, Oracle o, std::string detail, std::string clause = {});
    [[noreturn]] void fail(Verdict v, Oracle o, std::string detail, std::string clause = {});
    [[noreturn]] void fail_in_call(Verdict v, Oracle o, std::string detail) { fail(v, o, std::move(detail), call_clause); }
    Verdict verdict() const { return verdict_; }
    const std::optional<Failure>& failure() const { return failure_; }
    void set_failure(Verdict v, Failure f) {
        verdict_ = v;
        failure_ = std::move(f);
    }
    std::size_t op_index() const { return op_index_; }
    OpKind op_kind() const { return op_kind_; }
    // The rule's clause standing before a call (a refusal carries it), and
    // its clause for the decode being judged ("": none).
    const char* standing = nullptr;
    std::string call_clause;
    // The rule's standing clause for one sequence, where a check of the
    // whole memory finds a sequence the call did not feed changed (unset:
    // no rule). Set by the accounting oracle, which holds the rule.
    std::function<const char*(int seq)> standing_of;

private:
    Verdict verdict_ = Verdict::pass;
    std::optional<Failure> failure_;
    std::size_t op_index_ = 0;
    OpKind op_kind_ = OpKind::step;
};

class Observer {
public:
    virtual ~Observer() = default;
    // An op about to run (its index in the run).
    virtual void before_op(std::size_t /*index*/, const Op&) {}
    // Before and after a memory call the engine accepted.
    virtual void before_call(const targets::MemoryCall&) {}
    virtual void on_call(const targets::MemoryCall&) {}
    // A call the engine must refuse (an invalid op, a state load of other
    // weights): asked before the engine is.
    virtual void expect_refusal(const std::function<void(targets::Engine&)>& /*call*/, const std::string& /*what*/) {}
    virtual void expect_refused_load(int /*seq*/, int /*id*/, const std::string& /*what*/) {}
    // Around a decode call: before it; the engine refused it (an Error that
    // ends the op unless an observer ends it first); after it, in
    // registration order (on_decode may add to `d` for later observers),
    // then once more for judgements that need every other's (after_decode).
    virtual void before_decode(const Batch&) {}
    virtual void on_engine_refused(const Batch&, const Error&) {}
    virtual void on_decode(Decoded&) {}
    virtual void after_decode(const Decoded&) {}
    // ABI 12: the abort callback stopped the call `called` part way (in
    // place of on_decode; after_decode follows with `kept`). `kept` is what the engine kept
    // of it, read back from its memory: each sequence's first tokens, as a
    // decode with no rows. By default it is taken as that decode (the
    // reference computes the kept rows, a twin decodes them, the K/V is
    // read back); an observer whose expectation covers the whole call says
    // otherwise.
    virtual void on_aborted(const Batch& /*called*/, Decoded& kept) { on_decode(kept); }
    virtual void after_op(OpKind) {}  // every op that ran
    virtual void at_end() {}          // the run is over

    // The harness's self-test (sim/tests/handling_test.cpp): the index in
    // MemoryCall of the one call kind this observer is not told of, as if
    // its handling were removed (-1: none).
    int dropped_call = -1;
};

}  // namespace kvweld::sim
