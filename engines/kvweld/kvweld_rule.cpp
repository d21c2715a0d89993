// kvweld's own engine behind the ABI (engines/kvweld): one session, so one
// held plan, per sequence. Its counters are builds, reuses of a kept plan
// and rebinds.
//
// Clause 1: a sequence's first decode since it was opened builds its plan.
// Clause 2: its first decode after its storage was replaced (clear_seq,
//   clear_all, copy_seq into it, swap_layer) rebinds the plan: the capacity (n_ctx)
//   and the model never change behind this ABI, so a rebind always serves.
// Clause 3: every other decode reuses the plan as kept; truncate keeps the
//   storage, so it keeps the plan too.
// Clause 4: after a reload (a new model instance, same or new weights)
//   each sequence's next decode builds: a rebind cannot change the model.
#include "engines/reuse_rule.hpp"

#include "engine/cat.hpp"

#include <set>

namespace kvweld::engines {

namespace {

class KvweldRule final : public ReuseRule {
public:
    // kvweld's storage contract: a new sequence, clear, a copy's
    // destination, reload (which clears) and swap_layer get new storage;
    // decode and truncate touch none.
    StorageEffect storage_effect(SeqOp op) const override {
        return op == SeqOp::decode || op == SeqOp::truncate ? StorageEffect::keeps : StorageEffect::replaces;
    }
    ReuseExpectation on_decode(std::span<const int> seqs) override {
        int builds = 0, rebinds = 0;
        for (int s : seqs) {
            const bool build = planned_.insert(s).second || reloaded_.erase(s);
            const bool replaced = replaced_.erase(s);  // a build binds the new storage too
            builds += build ? 1 : 0;
            rebinds += !build && replaced ? 1 : 0;
        }
        last_builds_ = builds;
        last_rebinds_ = rebinds;
        return exact_expectation(int(seqs.size()), builds, rebinds);
    }
    std::string why_last() const override {
        return cat("clauses 1 and 4: ", last_builds_, " first decodes (since open or reload) build; clause 2: ",
                   last_rebinds_, " after replaced storage rebind; clause 3: the rest keep");
    }
    void on_open(int seq) override { forget(seq); }
    void on_close(int seq) override { forget(seq); }
    void on_clear(int seq) override { replaced(seq); }
    void on_clear_all() override { replaced_ = planned_; }
    void on_copy(int, int dst) override { replaced(dst); }
    void on_swap_layer(int seq, int) override { replaced(seq); }
    void on_reload() override {
        reloaded_ = planned_;
    }

private:
    void forget(int seq) {
        planned_.erase(seq);
        replaced_.erase(seq);
        reloaded_.erase(seq);
    }
    void replaced(int seq) {
        if (planned_.count(seq)) replaced_.insert(seq);
    }
    std::set<int> planned_;   // sequences whose session holds a plan
    std::set<int> replaced_;  // of those, the ones whose storage changed since their last decode
    std::set<int> reloaded_;  // of those, the ones not decoded since a reload
    int last_builds_ = 0, last_rebinds_ = 0;
};

}  // namespace

std::unique_ptr<ReuseRule> kvweld_reuse_rule(const EngineSetup&) { return std::make_unique<KvweldRule>(); }

}  // namespace kvweld::engines
