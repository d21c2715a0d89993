#include "sim/shrink.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"

namespace kvweld::sim {

namespace {

// Sets v to zero; false when it already was (nothing to simplify).
template <class T>
bool zero(T& v) {
    if (v == T{}) return false;
    v = T{};
    return true;
}

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

    void ddmin() {
        std::size_t n = 2;
        while (best_.size() >= 2 && runs_ < max_runs_) {
            const std::size_t chunk = (best_.size() + n - 1) / n;
            bool reduced = false;
            for (std::size_t start = 0; start < best_.size(); start += chunk) {
                std::vector<Op> complement(best_.begin(), best_.begin() + static_cast<long>(start));
                const std::size_t end = std::min(best_.size(), start + chunk);
                complement.insert(complement.end(), best_.begin() + static_cast<long>(end), best_.end());
                if (try_keep(complement)) {
                    n = std::max<std::size_t>(n - 1, 2);
                    reduced = true;
                    break;
                }
            }
            if (reduced) continue;
            if (n >= best_.size()) break;
            n = std::min(best_.size(), n * 2);
        }
    }

    // Simpler arguments, one op at a time: fewer tokens, smaller numbers.
    void simplify_arguments() {
        for (std::size_t i = 0; i < best_.size(); ++i) {
            for (auto simplify : simplifications()) {
                if (i >= best_.size()) break;
                std::vector<Op> candidate = best_;
                if (!simplify(candidate[i])) continue;
                try_keep(candidate);
            }
        }
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
    s.ddmin();
    s.simplify_arguments();
    s.ddmin();
    return ShrinkResult{s.best_, s.result_, s.runs_};
}

}  // namespace kvweld::sim
