// The accounting oracle of the simulator, for engines with plan
// counters and a reuse rule (targets/registry.hpp): the expectation is the
// rule's, from the op log alone; the counters are judged, and never taken
// alone: they must never go down, and where the engine reports a plan
// identity (KVWELD_CAP_PLAN_SERIAL) the builds they count must match the
// plan serials the sequences show.
#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/simulator.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace kvweld::sim {

std::string batch_shape(const std::vector<int>& seqs) {
    std::map<int, int> tokens;
    for (int s : seqs) ++tokens[s];
    int lo = 1 << 30, hi = 0;
    for (const auto& [s, n] : tokens) {
        lo = std::min(lo, n);
        hi = std::max(hi, n);
    }
    return cat(tokens.size(), "x", lo, lo == hi ? "" : cat("-", hi));
}

void Simulator::check_accounting(const std::vector<Pair>& pairs,
                                      const std::optional<kvweld_engine_counters>& before) {
    if (!before) return;  // no counters read: an unchecked run, or an engine without them
    std::vector<int> seqs;
    for (const Pair& p : pairs) seqs.push_back(p.seq);
    const auto after = read_counters();
    require(after.has_value(), "engine ", engine_->name(), " stopped reporting its counters");
    const auto delta = [](std::uint64_t a, std::uint64_t b) { return std::int64_t(a) - std::int64_t(b); };
    const std::int64_t reused = delta(after->reused, before->reused);
    const std::int64_t builds = delta(after->builds, before->builds);
    const std::int64_t rebound = delta(after->rebound, before->rebound);
    // What the engine counted, with or without a rule (a release the rule
    // does not state the facts of still shows its reuse).
    stats_.reused += std::uint64_t(std::max<std::int64_t>(0, reused));
    stats_.builds += std::uint64_t(std::max<std::int64_t>(0, builds));
    stats_.rebinds += std::uint64_t(std::max<std::int64_t>(0, rebound));
    if (!rule_) return;
    const ReuseExpectation& e = *expectation_;
    if (oracles_.plan_identity) check_plan_identity(pairs, builds);
    stats_.plans += std::uint64_t(e.plans);
    stats_.must_reuse += std::uint64_t(e.must_reuse);
    stats_.must_reuse_shared += std::uint64_t(e.must_reuse_shared);
    stats_.may_reuse += std::uint64_t(e.may_reuse);
    ShapeStats& shape = shapes_[batch_shape(seqs)];
    ++shape.calls;
    shape.plans += std::uint64_t(e.plans);
    shape.must_reuse += std::uint64_t(e.must_reuse);
    shape.may_reuse += std::uint64_t(e.may_reuse);
    shape.reused += std::uint64_t(std::max<std::int64_t>(0, reused));
    const auto counted = [&] {  // the failure message, built only on a failure
        return cat("the engine counted ", reused, " reused, ", builds, " built, ", rebound, " rebound in a call of ",
                   pairs.size(), " tokens; the rule: ", e.plans, " plans, reuse ", e.must_reuse,
                   e.may_reuse ? cat("..", e.must_reuse + e.may_reuse) : "", e.builds ? cat(", builds ", *e.builds) : "",
                   e.rebinds ? cat(", rebinds ", *e.rebinds) : "", " (", rule_->why_last(), ")");
    };
    // Less preparation than the rule justifies is missed: more reuse than
    // allowed, fewer builds, or fewer builds and rebinds together (judged
    // first: a build done as a rebind is a missed build). More is spurious.
    const int prepared = int(builds + rebound), justified = e.builds.value_or(0) + e.rebinds.value_or(0);
    const bool counts_preparation = e.builds && e.rebinds;
    if (reused > e.must_reuse + e.may_reuse || (e.builds && builds < *e.builds) ||
        (counts_preparation && prepared < justified))
        fail(Verdict::missed_invalidation, Oracle::accounting, counted(), e.clause ? e.clause : "");
    const std::string clause = e.clause ? e.clause : "";
    if (reused < e.must_reuse || (e.builds && builds > *e.builds) || (counts_preparation && prepared > justified))
        fail(Verdict::spurious_invalidation, Oracle::accounting, counted(), clause);
}

std::optional<kvweld_engine_counters> Simulator::read_counters() {
    if (!counters_) return std::nullopt;
    const auto now = engine_->counters();
    require(now.has_value(), "engine ", engine_->name(), " stopped reporting its counters");
    const auto was = last_counters_;
    last_counters_ = now;
    if (was && (now->builds < was->builds || now->reused < was->reused || now->rebound < was->rebound))
        fail(Verdict::engine_error, Oracle::accounting,
             cat("counters went down: builds ", was->builds, " -> ", now->builds, ", reused ", was->reused, " -> ",
                 now->reused, ", rebound ", was->rebound, " -> ", now->rebound,
                 " (a counter that restarts hides the work it counted)"));
    return now;
}

void Simulator::check_plan_identity(const std::vector<Pair>& pairs, std::int64_t builds) {
    std::set<std::uint64_t> fresh;  // serials this call showed for the first time in the run
    std::set<int> asked;
    for (const Pair& p : pairs) {
        if (!asked.insert(p.seq).second) continue;
        const std::uint64_t serial = engine_->plan_serial(p.seq);
        if (serial == 0)
            fail(Verdict::engine_error, Oracle::accounting,
                 cat("sequence ", p.seq, " was decoded but reports no plan serial"));
        if (!plan_serials_.count(serial)) fresh.insert(serial);
    }
    plan_serials_.insert(fresh.begin(), fresh.end());
    if (std::int64_t(fresh.size()) > builds || (builds > 0 && fresh.empty()))
        fail(Verdict::engine_error, Oracle::accounting,
             cat("the counters say ", builds, " builds but the call's sequences show ", fresh.size(),
                 " plan serials never seen before: the counters do not describe what the engine did"));
}

}  // namespace kvweld::sim
