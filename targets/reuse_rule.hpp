// Accounting: a rule, one per engine (in the engine's folder, beside its
// adapter), of when a decode call is justified to reuse the plans it runs.
// The simulator tells the rule every call and every memory op, in order, and
// checks each call's counter deltas against what the rule expects: fewer
// reuses than it must is a spurious invalidation, more than it may is a
// missed one. An engine without a rule (or without counters) runs with the
// accounting oracle unavailable, and every report says so.
#pragma once

#include "targets/engine.hpp"
#include "targets/memory_call.hpp"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvweld::targets {

// A term of the reuse condition the rule states (llama.cpp's: each compared
// in llm_graph_params::allow_reuse, an input's can_reuse, or a memory
// update that resets the held graphs). `tied`: it cannot change without
// another (a ubatch's token count moves with its sequences or their
// tokens), so it counts as exercised when it changed at all; `why_not`:
// the engine's API gives no way to change it, named and never counted.
struct ReuseTerm {
    const char* name;
    bool tied = false;
    const char* why_not = nullptr;
};

// What one decode call may do: it runs `plans` plans (graphs), of which at
// least `must_reuse` and at most `must_reuse + may_reuse` reuse the plan
// before them. `builds` and `rebinds`, when set, are exact counts.
struct ReuseExpectation {
    int plans = 0;
    int must_reuse = 0;
    int may_reuse = 0;
    // Why the rule allows the may_reuse reuses without requiring them (a
    // static string naming its clause), where it does.
    const char* may_why = nullptr;
    std::optional<int> builds;
    std::optional<int> rebinds;
    // Of must_reuse: reuses of a plan that serves more than one sequence
    // (a ubatch of several, or one plan for a whole pool after a pair of
    // another sequence), so a swarm can show its rule was not vacuous there.
    int must_reuse_shared = 0;
    // Per plan that has a previous one: bit i set where terms()[i] differs
    // from the previous plan's (the reuse condition's coverage).
    std::vector<std::uint32_t> changed = {};
    // The contract clause (not a design fact of the engine) that required a
    // reuse, or a build, in this call, where the rule names one: a known
    // finding of an engine release is matched on it (sim/known_findings.hpp).
    const char* clause = nullptr;
};

// A call whose builds and rebinds the rule knows exactly: every other plan
// must reuse.
inline ReuseExpectation exact_expectation(int plans, int builds, int rebinds) {
    return {plans, plans - builds - rebinds, 0, nullptr, builds, rebinds, 0};
}

// What an op does to a sequence's storage (the ledger, for engines that
// report storage): keep it, replace it, or either.
enum class StorageEffect : std::uint8_t { keeps, replaces, may_replace };

// What the simulator did to a sequence, as far as its storage goes.
enum class SeqOp : std::uint8_t { decode, truncate, open, recycle, clear, copy_into, reload, swap_layer, migrate, shift, load };

// Without a rule of its own, an engine may replace a sequence's storage at
// any memory op, but never in a decode, a truncate, a recycling open or a
// migration (which moves the storage it has).
inline StorageEffect default_storage_effect(SeqOp op) {
    return op == SeqOp::decode || op == SeqOp::truncate || op == SeqOp::recycle || op == SeqOp::migrate
               ? StorageEffect::keeps
               : StorageEffect::may_replace;
}

class ReuseRule {
public:
    virtual ~ReuseRule() = default;
    virtual StorageEffect storage_effect(SeqOp op) const { return default_storage_effect(op); }
    // `seqs`: the call's sequence id per token, in batch order; `outputs`:
    // whether each token's logits were asked for (empty: every one).
    virtual ReuseExpectation on_decode(std::span<const int> seqs, std::span<const std::uint8_t> outputs) = 0;
    ReuseExpectation on_decode(std::span<const int> seqs) { return on_decode(seqs, {}); }
    // The clauses that decided the last call, for failure messages: kept
    // as numbers and formatted only when asked, so a passing call costs no
    // text.
    virtual std::string why_last() const = 0;
    // The terms of the reuse condition this rule states (none: not counted).
    virtual std::vector<ReuseTerm> terms() const { return {}; }
    // A clause that stands for these sequences before the call is decided
    // (their rows left wrong by an earlier op): a call the engine refuses
    // carries it too (nullptr: none).
    virtual const char* standing_clause(std::span<const int> /*seqs*/) const { return nullptr; }
    // ... and for saved state `id` (calls::Save), which a load refused carries.
    virtual const char* state_clause(int /*id*/) const { return nullptr; }
    // Every memory call the simulator made of the engine, in order, as the
    // one value that describes it (targets/memory_call.hpp), carrying the
    // simulator's own account where it matters (the adapters before and
    // after, not as the engine reports them). Each rule visits it
    // exhaustively and names the calls it does not care about in an
    // Ignored<...> list, so a new call kind fails to compile in every rule
    // until each handles or names it. Warmup switched on a dense model is
    // not told: nothing routes there.
    virtual void on_call(const MemoryCall& call) = 0;
    // ABI 12: a call the abort callback stopped (`seqs`, `outputs`: the
    // whole call; `kept`: the sequence of each token the engine kept, in
    // call order). By default the engine ran the kept tokens and nothing
    // more (kvweld's engine asks before each token): the expectation of a
    // call of those, judged like any. A rule whose engine stops inside a
    // plan it prepared follows what ran and returns nullopt: not judged.
    virtual std::optional<ReuseExpectation> on_aborted(std::span<const int> /*seqs*/,
                                                       std::span<const std::uint8_t> /*outputs*/,
                                                       std::span<const int> kept) {
        return kept.empty() ? ReuseExpectation{} : on_decode(kept, {});
    }
};

}  // namespace kvweld::targets
