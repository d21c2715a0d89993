#include "sim/shrink.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "sim/ddmin.hpp"

namespace kvweld::sim {

namespace {

class Shrinker {
public:
    Shrinker(const SimConfig& config, int steps, Verdict target, int max_runs)
        : config_(config), steps_(steps), target_(target), max_runs_(max_runs) {}

    // Runs the candidate; on the same failure, keeps it (cut after the
    // failing op) and returns true.
    bool try_keep(const std::vector<Op>& candidate) {
        if (runs_ >= max_runs_) return false;
        ++runs_;
        RunResult r = run_ops(config_, candidate, steps_);
        if (r.verdict != target_) return false;
        best_ = r.ops;
        result_ = std::move(r);
        return true;
    }

    void run() {
        shrink_ops(best_, simplifications(), [this](const std::vector<Op>& c) { return try_keep(c); },
                   [this] { return runs_ >= max_runs_; });
    }

    std::vector<Op> best_;
    RunResult result_;
    int runs_ = 0;

private:
    using Simplify = bool (*)(Op&);
    static std::vector<Simplify> simplifications() {
        return {
            [](Op& op) { return zero(op.pick); },
            [](Op& op) { return zero(op.pick2); },
            [](Op& op) {  // halve a prompt or the drafts
                const std::size_t keep = op.kind == OpKind::admit ? std::max<std::size_t>(1, op.tokens.size() / 2)
                                                                  : op.tokens.size() / 2;
                if (keep >= op.tokens.size()) return false;
                op.tokens.resize(keep);
                op.m = std::min(op.m, static_cast<int>(keep));
                return true;
            },
            [](Op& op) {
                bool changed = false;
                for (int& t : op.tokens) changed = zero(t) || changed;
                return changed;
            },
            [](Op& op) { return zero(op.max_new); },
            [](Op& op) { return zero(op.m); },
            [](Op& op) { return zero(op.layer); },
            [](Op& op) { return zero(op.length); },
            [](Op& op) { return op.kind != OpKind::reload && zero(op.seed); },
        };
    }

    SimConfig config_;
    int steps_;
    Verdict target_;
    int max_runs_;
};

}  // namespace

ShrinkResult shrink(const SimConfig& config, const std::vector<Op>& ops, int steps, Verdict target,
                    int max_runs) {
    require(target != Verdict::pass, "shrink: the trace passes; there is nothing to shrink");
    Shrinker s(config, steps, target, max_runs);
    require(s.try_keep(ops), "shrink: the trace does not fail with ", to_string(target));
    s.run();
    return ShrinkResult{s.best_, s.result_, s.runs_};
}

}  // namespace kvweld::sim
