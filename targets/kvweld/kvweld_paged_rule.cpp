// kvweld's paged engine behind the ABI (targets/kvweld/kvweld_paged_plugin.cpp):
// one KV pool and ONE held plan for every sequence; each (sequence, token)
// pair of a call runs the plan once. Its counters are builds, reuses of
// the kept plan and rebinds.
//
// Clause 1: the first pair ever builds the plan.
// Clause 2: the first pair after a reload builds (a new model instance).
// Clause 3: the first pair after the pool's storage was replaced rebinds:
//   an explicit grow or reset, or this pair's own growth (it needed a block when
//   none was free: the pool doubles first). The block model
//   (targets/block_model.hpp) says when, from the op log alone.
// Clause 4: every other pair reuses the plan as kept: opening, closing,
//   truncating, preempting, forking (shared blocks, copy on write) and
//   compacting a sequence change per-step data only; so do LoRA scales and
//   the control vector.
// Clause 5: the first pair after the LoRA adapter set changed (another set,
//   or none) builds: the set is in the plan's key.
#include "targets/kvweld/kvweld_entries.hpp"
#include "targets/block_model.hpp"
#include "targets/reuse_rule.hpp"

#include "util/cat.hpp"
#include "util/overloaded.hpp"

#include <optional>
#include "kvweld/engine_abi.h"

namespace kvweld::targets {

namespace {

class KvweldPagedRule final : public ReuseRule {
public:
    explicit KvweldPagedRule(const EngineSetup& setup) : blocks_(BlockModel::for_kvweld_paged(setup)) {}

    StorageEffect storage_effect(SeqOp) const override { return StorageEffect::keeps; }
    ReuseExpectation on_decode(std::span<const int> seqs, std::span<const std::uint8_t>) override {
        int builds = 0, rebinds = 0, shared = 0;
        for (int s : seqs) {
            const bool grew = blocks_.append(s);
            const bool other_seq = last_seq_ && *last_seq_ != s;
            last_seq_ = s;
            if (!built_ || reloaded_ || adapters_changed_) {
                ++builds;  // a build binds the current storage too
                built_ = true;
                reloaded_ = replaced_ = adapters_changed_ = false;
            } else if (grew || replaced_) {
                ++rebinds;
                replaced_ = false;
            } else {
                shared += other_seq ? 1 : 0;  // the one plan, kept across sequences
            }
        }
        last_builds_ = builds;
        last_rebinds_ = rebinds;
        ReuseExpectation e = exact_expectation(int(seqs.size()), builds, rebinds);
        e.must_reuse_shared = shared;
        return e;
    }
    std::string why_last() const override {
        return cat("clauses 1, 2 and 5: ", last_builds_,
                   " builds (first pair, or first after a reload or a new adapter set); clause 3: ",
                   last_rebinds_, " rebinds after the pool's storage was replaced (", blocks_.grows(),
                   " grows so far, ", blocks_.n_blocks(), " blocks); clause 4: the rest keep");
    }
    void on_call(const MemoryCall& call) override {
        std::visit(Overloaded{
                       [&](const calls::Close& c) { blocks_.close(c.seq); },
                       [&](const calls::Truncate& c) { blocks_.truncate(c.seq, c.n); },
                       [&](const calls::Clear& c) { blocks_.clear(c.seq); },
                       [&](const calls::ClearAll&) { blocks_.clear_all(); },
                       [&](const calls::Copy& c) { blocks_.fork(c.src, c.dst); },
                       [&](const calls::Reload&) {
                           blocks_.clear_all();
                           reloaded_ = true;
                       },
                       [&](const calls::SetLoras& c) { adapters(*c.before, *c.after); },
                       [&](const calls::SetCvec& c) { adapters(*c.before, *c.after); },
                       [&](const calls::SetWarmup& c) { adapters(*c.before, *c.after); },
                       [&](const calls::PoolOp& c) {
                           if (c.op == KVWELD_POOL_COMPACT) return;
                           c.op == KVWELD_POOL_GROW ? blocks_.grow() : blocks_.reset();
                           replaced_ = true;
                       },
                       // Clause 4: an open takes no block; the rest are
                       // calls the paged engine does not declare, or step data.
                       Ignored<calls::Open, calls::OpenSized, calls::SwapLayer, calls::Migrate, calls::Shift,
                               calls::Save, calls::Load, calls::LoadRefused, calls::SetLive, calls::SetSampler,
                               calls::Keep>{},
                   },
                   call);
    }

private:
    void adapters(const Adapters& before, const Adapters& after) {
        adapters_changed_ = adapters_changed_ || before.set_id() != after.set_id();
    }

    BlockModel blocks_;
    bool built_ = false, reloaded_ = false, replaced_ = false, adapters_changed_ = false;
    std::optional<int> last_seq_;  // the sequence of the pair the plan last ran
    int last_builds_ = 0, last_rebinds_ = 0;
};

}  // namespace

std::unique_ptr<ReuseRule> kvweld_paged_reuse_rule(const EngineSetup& config, const std::string&) {
    return std::make_unique<KvweldPagedRule>(config);
}

}  // namespace kvweld::targets
