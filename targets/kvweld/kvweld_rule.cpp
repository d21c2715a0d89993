// kvweld's dense engine (targets/kvweld/dense_engine.hpp), in process or
// behind the ABI: one session, so one held plan, per sequence slot, kept
// across requests. Its counters are builds, reuses of a kept plan and
// rebinds. The contract, clause by clause (the key is engine/plan_key.hpp's):
//
// Clause 1: a slot's first decode ever builds its plan.
// Clause 2: after a reload (a new model instance, same or new weights) each
//   slot's next decode builds: a rebind cannot change the model.
// Clause 3: the first decode on storage other than the plan was last
//   prepared on (after a fresh open, clear, clear_all, a copy into it,
//   swap_layer, a migration onto it) rebinds the plan; it builds instead
//   under policy=rebuild, or when the storage's capacity differs from the
//   plan's (the capacity sizes the plan's buffers). Storage migrated back
//   onto the slot whose plan was prepared on it is not other storage.
// Clause 2b: after a change of which LoRA adapters are in the engine's set,
//   each slot's next decode builds (the set is in the key: the plan's op
//   list holds its LoRA ops).
// Clause 0: with reuse=0 (the measuring twin) every decode builds.
// Clause 5: with causal attention off (the live setting causal_attn=0) a
//   sequence's tokens of one call run as one span through one plan
//   (DecodeSession::decode_span): its first token is decided as clauses 0-4
//   say, the others keep that plan, reuse=0 included.
// Clause 4: every other decode reuses the plan as kept; truncate and a
//   recycling open (truncate_to(0) on the same storage) keep the storage,
//   so they keep the plan too; so do new LoRA scales and a control vector
//   set, changed, re-ranged or cleared (step data: the contract, and
//   kvweld's choice; llama.cpp rebuilds on each); so do a context shift
//   (its rows are rewritten and re-rotated in place: the rotation is data)
//   and a state load (written into the sequence's own storage).
#include "targets/kvweld/kvweld_entries.hpp"
#include "targets/reuse_rule.hpp"

#include "util/cat.hpp"
#include "util/overloaded.hpp"
#include "targets/kvweld/dense_engine.hpp"

#include "targets/abi_lists.hpp"

#include <map>
#include <set>

namespace kvweld::targets {

namespace {

class KvweldRule final : public ReuseRule {
public:
    explicit KvweldRule(const EngineSetup& setup)
        : policy_(dense_settings(setup.params).policy), reuse_(dense_settings(setup.params).reuse), n_ctx_(setup.n_ctx) {}

    StorageEffect storage_effect(SeqOp op) const override {
        switch (op) {
            case SeqOp::decode:
            case SeqOp::truncate:
            case SeqOp::recycle:
            case SeqOp::migrate:
            case SeqOp::shift:
            case SeqOp::load: return StorageEffect::keeps;
            default: return StorageEffect::replaces;
        }
    }
    ReuseExpectation on_decode(std::span<const int> seqs, std::span<const std::uint8_t>) override {
        int builds = 0, rebinds = 0;
        std::set<int> spanned;  // clause 5: the sequences whose span this call has begun
        for (int s : seqs) {
            Slot& slot = slots_[s];
            const bool moved = slot.storage != slot.plan_storage;
            const bool in_span = !causal_ && !spanned.insert(s).second;
            const bool build = (!reuse_ && !in_span) || slot.plan_capacity == 0 || slot.reloaded || slot.adapters_changed ||
                               (moved && (policy_ == RebindPolicy::rebuild || slot.plan_capacity != slot.capacity));
            builds += build ? 1 : 0;
            rebinds += !build && moved ? 1 : 0;
            slot.plan_capacity = slot.capacity;
            slot.plan_storage = slot.storage;
            slot.reloaded = false;
            slot.adapters_changed = false;
        }
        last_builds_ = builds;
        last_rebinds_ = rebinds;
        return exact_expectation(int(seqs.size()), builds, rebinds);
    }
    std::string why_last() const override {
        if (!reuse_) return cat("clause 0: reuse=0, all ", last_builds_, " decodes build", causal_ ? "" : " (clause 5: each span's first)");
        return cat("clauses 1-3: ", last_builds_, " first decodes (ever, since a reload or a new adapter set, or on other storage the plan "
                   "cannot rebind to: policy=", to_string(policy_), ", capacity) build; clause 3: ", last_rebinds_,
                   " on other storage rebind; clause 4: the rest keep");
    }
    void on_call(const MemoryCall& call) override {
        std::visit(Overloaded{
                       [&](const calls::Open& c) { open(c.seq, n_ctx_, false); },
                       [&](const calls::OpenSized& c) { open(c.seq, c.capacity, c.recycle); },
                       [&](const calls::Close& c) { slots_[c.seq].open = false; },  // the slot keeps its plan and storage
                       [&](const calls::Clear& c) { slots_[c.seq].storage = ++minted_; },
                       [&](const calls::Keep& c) {
                           for (int s : c.emptied) slots_[s].storage = ++minted_;
                       },
                       [&](const calls::ClearAll&) {
                           for (auto& [id, s] : slots_)
                               if (s.open) s.storage = ++minted_;  // a closed slot's storage is kept
                       },
                       [&](const calls::Copy& c) {
                           if (c.opened) open(c.dst, n_ctx_, false);
                           slots_[c.dst].capacity = slots_[c.src].capacity;
                           slots_[c.dst].storage = ++minted_;
                       },
                       [&](const calls::SwapLayer& c) { slots_[c.seq].storage = ++minted_; },
                       [&](const calls::Migrate& c) { migrate(c.from, c.to); },
                       [&](const calls::SetLoras& c) { adapters(*c.before, *c.after); },
                       [&](const calls::SetCvec& c) { adapters(*c.before, *c.after); },
                       [&](const calls::SetWarmup& c) { adapters(*c.before, *c.after); },
                       [&](const calls::SetLive& c) {
                           if (c.key == abi::kCausalKey) causal_ = c.value == "1";
                       },
                       [&](const calls::Reload&) {  // a new model for every plan; the open slots' storage is emptied
                           for (auto& [id, s] : slots_) {
                               s.reloaded = true;
                               if (s.open) s.storage = ++minted_;
                           }
                       },
                       // Clause 4: a rewind, a shift and a load keep the
                       // storage, and samplers are step data; a dense engine
                       // has no pool.
                       Ignored<calls::Truncate, calls::Shift, calls::Save, calls::Load, calls::LoadRefused,
                               calls::SetSampler, calls::PoolOp>{},
                   },
                   call);
    }

private:
    void open(int seq, int capacity, bool recycle) {
        Slot& s = slots_[seq];
        s.open = true;
        if (recycle) return;  // the slot's own storage, rewound
        s.capacity = capacity;
        s.storage = ++minted_;
    }
    // The storage moves with its identity: back on the slot whose plan was
    // built on it, that plan is valid again.
    void migrate(int from, int to) {
        Slot& src = slots_[from];
        Slot& dst = slots_[to];
        dst.capacity = src.capacity;
        dst.storage = src.storage;
        dst.open = true;
        src.storage = 0;
        src.open = false;
    }
    void adapters(const Adapters& before, const Adapters& after) {  // clause 2b; the rest is step data
        if (before.set_id() != after.set_id())
            for (auto& [id, s] : slots_) s.adapters_changed = true;
    }

    // Storage identities are the rule's own, minted per replacement.
    struct Slot {
        int plan_capacity = 0;            // the held plan's capacity (0: no plan yet)
        std::uint64_t plan_storage = 0;   // the storage it was last prepared on
        int capacity = 0;                 // the storage's the slot holds
        std::uint64_t storage = 0;        // which storage that is
        bool reloaded = false;            // not decoded since a reload
        bool adapters_changed = false;    // not decoded since the adapter set changed
        bool open = false;
    };
    RebindPolicy policy_;
    bool reuse_;
    bool causal_ = true;  // clause 5
    int n_ctx_;
    std::map<int, Slot> slots_;
    std::uint64_t minted_ = 0;
    int last_builds_ = 0, last_rebinds_ = 0;
};

}  // namespace

std::unique_ptr<ReuseRule> kvweld_reuse_rule(const EngineSetup& setup, const std::string&) { return std::make_unique<KvweldRule>(setup); }

}  // namespace kvweld::targets
