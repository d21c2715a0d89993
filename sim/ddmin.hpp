// Shrinking a failing op list, for any kind of op: delta debugging over the
// ops, then simpler arguments one op at a time, then delta debugging again.
// `try_keep(candidate)` runs a candidate and, when it fails the same way,
// stores what ran (cut after the failing op) in `best` and returns true;
// `spent()` says when the run budget is gone.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kvweld::sim {

// Sets v to its zero value; false when it already was (nothing to simplify).
template <class T>
bool zero(T& v) {
    if (v == T{}) return false;
    v = T{};
    return true;
}

template <class Op, class TryKeep, class Spent>
void ddmin(std::vector<Op>& best, TryKeep&& try_keep, Spent&& spent) {
    std::size_t n = 2;
    while (best.size() >= 2 && !spent()) {
        const std::size_t chunk = (best.size() + n - 1) / n;
        bool reduced = false;
        for (std::size_t start = 0; start < best.size(); start += chunk) {
            std::vector<Op> complement(best.begin(), best.begin() + static_cast<long>(start));
            const std::size_t end = std::min(best.size(), start + chunk);
            complement.insert(complement.end(), best.begin() + static_cast<long>(end), best.end());
            if (try_keep(complement)) {
                n = std::max<std::size_t>(n - 1, 2);
                reduced = true;
                break;
            }
        }
        if (reduced) continue;
        if (n >= best.size()) break;
        n = std::min(best.size(), n * 2);
    }
}

// Each simplification (bool(Op&): false when it changes nothing) tried on
// each op in turn.
template <class Op, class Simplifications, class TryKeep>
void simplify_arguments(std::vector<Op>& best, const Simplifications& simplifications, TryKeep&& try_keep) {
    for (std::size_t i = 0; i < best.size(); ++i) {
        for (auto simplify : simplifications) {
            if (i >= best.size()) break;
            std::vector<Op> candidate = best;
            if (!simplify(candidate[i])) continue;
            try_keep(candidate);
        }
    }
}

template <class Op, class Simplifications, class TryKeep, class Spent>
void shrink_ops(std::vector<Op>& best, const Simplifications& simplifications, TryKeep&& try_keep, Spent&& spent) {
    ddmin(best, try_keep, spent);
    simplify_arguments(best, simplifications, try_keep);
    ddmin(best, try_keep, spent);
}

}  // namespace kvweld::sim
