// The accounting oracle, for engines with plan counters and a reuse rule
// (targets/registry.hpp): the expectation is the rule's, from the calls
// alone; the counters are judged, and never taken alone: they must never
// go down, and where the engine reports a plan identity
// (KVWELD_CAP_PLAN_SERIAL) the builds they count must match the plan
// serials the sequences show. Without a rule, the engine's counts are
// added up for the report and nothing is judged.
#include "sim/observers.hpp"

#include "util/overloaded.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace kvweld::sim {

using namespace targets;

namespace {


std::int64_t delta(std::uint64_t after, std::uint64_t before) { return std::int64_t(after) - std::int64_t(before); }
std::uint64_t counted(std::int64_t n) { return std::uint64_t(std::max<std::int64_t>(0, n)); }

}  // namespace

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

Accounting::Accounting(const World& world, Judge& judge, RunStats& stats, std::unique_ptr<ReuseRule> rule,
                       bool counters, bool plan_identity)
    : world_(world), judge_(judge), stats_(stats), rule_(std::move(rule)), counters_(counters),
      plan_identity_(plan_identity) {
    read_counters();  // the first report is the baseline every later one must not fall below
    if (rule_) terms_ = rule_->terms();
    if (rule_)
        judge_.standing_of = [this](int seq) { return rule_->standing_clause(std::span<const int>(&seq, 1)); };
    for (const targets::ReuseTerm& t : terms_) {
        if (t.why_not) stats_.terms_unreachable[t.name] = t.why_not;
        else stats_.terms[t.name].tied = t.tied;
    }
}

// Each plan pair's changed terms, counted (RunStats::terms).
void Accounting::count_terms(const std::vector<std::uint32_t>& changed) {
    for (const std::uint32_t mask : changed)
        for (std::size_t i = 0; i < terms_.size(); ++i) {
            if (terms_[i].why_not) continue;
            RunStats::TermCount& t = stats_.terms[terms_[i].name];
            const std::uint32_t bit = 1u << i;
            t.changed += (mask & bit) ? 1 : 0;
            t.alone += mask == bit ? 1 : 0;
            t.held += (mask & bit) ? 0 : 1;
        }
}

// A refused load carries the clause of the state it loads.
void Accounting::before_call(const MemoryCall& call) {
    if (const auto* load = std::get_if<calls::Load>(&call); load && rule_) judge_.standing = rule_->state_clause(load->id);
}

// The rule is told what changed as the simulator's own account has it
// (which adapters, in order, at which scales; which vector), not as the
// engine reports.
void Accounting::on_call(const MemoryCall& call) {
    if (!rule_) return;
    // A dense model routes nothing: no plan depends on warmup there.
    if (std::holds_alternative<calls::SetWarmup>(call) && !world_.config.model.moe()) return;
    rule_->on_call(call);
}

void Accounting::before_decode(const Batch& b) {
    before_ = read_counters();
    std::vector<int> seqs(b.seqs.begin(), b.seqs.end());
    judge_.standing = rule_ ? rule_->standing_clause(seqs) : nullptr;  // what a refusal of this call carries
}

// The rule's expectation first: every oracle's failure names its clause.
void Accounting::on_decode(Decoded& d) {
    expectation_.reset();
    judge_.call_clause.clear();
    if (!rule_) return;
    const std::vector<int> seqs(d.batch.seqs.begin(), d.batch.seqs.end());
    expectation_ = rule_->on_decode(seqs, d.batch.outputs);
    if (expectation_->clause) judge_.call_clause = expectation_->clause;
}

// What the engine counted, with or without a rule (a release the rule
// does not state the facts of still shows its reuse).
Accounting::Counted Accounting::count_call(const Batch& b) {
    const auto after = read_counters();
    require(after.has_value(), "engine ", world_.engine.name(), " stopped reporting its counters");
    const Counted n{delta(after->reused, before_->reused), delta(after->builds, before_->builds),
                    delta(after->rebound, before_->rebound),
                    shapes_[batch_shape(std::vector<int>(b.seqs.begin(), b.seqs.end()))]};
    stats_.reused += counted(n.reused);
    stats_.builds += counted(n.builds);
    stats_.rebinds += counted(n.rebound);
    ++n.shape.calls;
    n.shape.reused += counted(n.reused);
    n.shape.built += counted(n.builds);
    return n;
}

// An aborted call: the rule says what ran of it (by default the kept
// tokens, as a call of their own); after_decode then judges it like any,
// once the other oracles have judged what it kept; where the rule cannot
// know the counts of a stopped call, they are added up and not judged.
void Accounting::on_aborted(const Batch& called, Decoded& kept) {
    expectation_.reset();
    judge_.call_clause.clear();
    aborted_ = &called;
    if (!rule_) return;
    expectation_ = rule_->on_aborted(std::vector<int>(called.seqs.begin(), called.seqs.end()), called.outputs,
                                     std::vector<int>(kept.batch.seqs.begin(), kept.batch.seqs.end()));
    if (expectation_ && expectation_->clause) judge_.call_clause = expectation_->clause;
}

// Last, once every other oracle has judged the call's rows and storage
// (an aborted call's shape is the call as made).
void Accounting::after_decode(const Decoded& d) {
    const Batch* called = std::exchange(aborted_, nullptr);
    if (!before_) return;  // no counters read: an unchecked run, or an engine without them
    const Counted n = count_call(called ? *called : d.batch);
    if (!rule_) return;
    if (!expectation_) {  // a stopped call the rule does not judge
        ++stats_.unjudged_aborted;
        if (plan_identity_) note_plan_serials(d.batch);
        return;
    }
    judge_counts(d.batch, n);
}

// A call's counts against the rule's expectation.
void Accounting::judge_counts(const Batch& b, const Counted& n) {
    const std::int64_t reused = n.reused, builds = n.builds, rebound = n.rebound;  // (clang: no lambda captures a binding)
    ShapeStats& shape = n.shape;
    const ReuseExpectation& e = *expectation_;
    if (plan_identity_) check_plan_identity(b, builds);
    stats_.plans += std::uint64_t(e.plans);
    stats_.must_reuse += std::uint64_t(e.must_reuse);
    stats_.must_reuse_shared += std::uint64_t(e.must_reuse_shared);
    stats_.may_reuse += std::uint64_t(e.may_reuse);
    if (e.may_reuse) stats_.may_reuse_why[e.may_why ? e.may_why : "(the rule names no clause)"] += std::uint64_t(e.may_reuse);
    count_terms(e.changed);
    shape.plans += std::uint64_t(e.plans);
    shape.must_reuse += std::uint64_t(e.must_reuse);
    shape.may_reuse += std::uint64_t(e.may_reuse);
    const auto message = [&] {  // built only on a failure
        return cat("the engine counted ", reused, " reused, ", builds, " built, ", rebound, " rebound in a call of ",
                   b.pairs.size(), " tokens; the rule: ", e.plans, " plans, reuse ", e.must_reuse,
                   e.may_reuse ? cat("..", e.must_reuse + e.may_reuse) : "", e.builds ? cat(", builds ", *e.builds) : "",
                   e.rebinds ? cat(", rebinds ", *e.rebinds) : "", " (", rule_->why_last(), ")");
    };
    // Less preparation than the rule justifies is missed: more reuse than
    // allowed, fewer builds, or fewer builds and rebinds together (judged
    // first: a build done as a rebind is a missed build). More is spurious.
    const int prepared = int(builds + rebound), justified = e.builds.value_or(0) + e.rebinds.value_or(0);
    const bool counts_preparation = e.builds && e.rebinds;
    const std::string clause = e.clause ? e.clause : "";
    if (reused > e.must_reuse + e.may_reuse || (e.builds && builds < *e.builds) ||
        (counts_preparation && prepared < justified))
        judge_.fail(Verdict::missed_invalidation, Oracle::accounting, message(), clause);
    if (reused < e.must_reuse || (e.builds && builds > *e.builds) || (counts_preparation && prepared > justified))
        judge_.fail(Verdict::spurious_invalidation, Oracle::accounting, message(), clause);
}

// A step read them after its call.
void Accounting::after_op(OpKind kind) {
    if (kind != OpKind::step) read_counters();
}

std::optional<kvweld_engine_counters> Accounting::read_counters() {
    if (!counters_) return std::nullopt;
    const auto now = world_.engine.counters();
    require(now.has_value(), "engine ", world_.engine.name(), " stopped reporting its counters");
    const auto was = last_;
    last_ = now;
    if (was && (now->builds < was->builds || now->reused < was->reused || now->rebound < was->rebound))
        judge_.fail(Verdict::engine_error, Oracle::accounting,
                    cat("counters went down: builds ", was->builds, " -> ", now->builds, ", reused ", was->reused,
                        " -> ", now->reused, ", rebound ", was->rebound, " -> ", now->rebound,
                        " (a counter that restarts hides the work it counted)"));
    return now;
}

void Accounting::note_plan_serials(const Batch& b) {
    for (const Pair& p : b.pairs)
        if (const std::uint64_t serial = world_.engine.plan_serial(p.seq)) plan_serials_.insert(serial);
}

// After a call, each plan serial first seen on one of its sequences needs
// a build the call counted, and a call that counts builds must show a new serial.
void Accounting::check_plan_identity(const Batch& b, std::int64_t builds) {
    std::set<std::uint64_t> fresh;  // serials this call showed for the first time in the run
    std::set<int> asked;
    for (const Pair& p : b.pairs) {
        if (!asked.insert(p.seq).second) continue;
        const std::uint64_t serial = world_.engine.plan_serial(p.seq);
        if (serial == 0)
            judge_.fail(Verdict::engine_error, Oracle::accounting,
                        cat("sequence ", p.seq, " was decoded but reports no plan serial"));
        if (!plan_serials_.count(serial)) fresh.insert(serial);
    }
    plan_serials_.insert(fresh.begin(), fresh.end());
    if (std::int64_t(fresh.size()) > builds || (builds > 0 && fresh.empty()))
        judge_.fail(Verdict::engine_error, Oracle::accounting,
                    cat("the counters say ", builds, " builds but the call's sequences show ", fresh.size(),
                        " plan serials never seen before: the counters do not describe what the engine did"));
}

}  // namespace kvweld::sim
