#include "sim/run_stats.hpp"

#include "util/cat.hpp"

#include <algorithm>

namespace kvweld::sim {

std::string RunStats::may_reuse_why_text() const {
    std::string out;
    for (const auto& [why, n] : may_reuse_why) out += cat(out.empty() ? "" : "; ", why, " (", n, ")");
    return out;
}

void RunStats::add(const RunStats& o) {
    for (const auto& [name, t] : o.terms) {
        TermCount& mine = terms[name];
        mine.tied = t.tied;
        mine.changed += t.changed, mine.alone += t.alone, mine.held += t.held;
    }
    terms_unreachable.insert(o.terms_unreachable.begin(), o.terms_unreachable.end());
    max_kv_error = std::max(max_kv_error, o.max_kv_error);
    embedding_rows += o.embedding_rows;
    non_causal_spans += o.non_causal_spans;
    non_causal_tokens += o.non_causal_tokens;
    routing_tie_rows += o.routing_tie_rows;
    sampled_rows += o.sampled_rows;
    aborted_calls += o.aborted_calls;
    aborted_fed += o.aborted_fed;
    aborted_kept += o.aborted_kept;
    unjudged_aborted += o.unjudged_aborted;
    sampled_compared += o.sampled_compared;
    max_embedding_error = std::max(max_embedding_error, o.max_embedding_error);
    ops_run += o.ops_run;
    ops_skipped += o.ops_skipped;
    for (int k = 0; k < kOpKinds; ++k) ops_by_kind[std::size_t(k)] += o.ops_by_kind[std::size_t(k)];
    for (const auto& [name, n] : o.variants) variants[name] += n;
    requests += o.requests;
    calls += o.calls;
    rows += o.rows;
    reference_rows += o.reference_rows;
    batched_calls += o.batched_calls;
    same_shape_calls += o.same_shape_calls;
    drafts += o.drafts;
    rejected += o.rejected;
    refused += o.refused;
    memory_refused += o.memory_refused;
    twin_rows += o.twin_rows;
    twin_within_tolerance += o.twin_within_tolerance;
    fresh_rows += o.fresh_rows;
    fresh_unjudged += o.fresh_unjudged;
    max_fresh_error = std::max(max_fresh_error, o.max_fresh_error);
    plans += o.plans;
    reused += o.reused;
    must_reuse += o.must_reuse;
    must_reuse_shared += o.must_reuse_shared;
    may_reuse += o.may_reuse;
    for (const auto& [why, n] : o.may_reuse_why) may_reuse_why[why] += n;
    builds += o.builds;
    rebinds += o.rebinds;
    peer_reused += o.peer_reused;
    peer_builds += o.peer_builds;
    peer_rebinds += o.peer_rebinds;
    peer_rows += o.peer_rows;
    reuse_more += o.reuse_more;
    reuse_fewer += o.reuse_fewer;
    prepared_otherwise += o.prepared_otherwise;
    max_peer_error = std::max(max_peer_error, o.max_peer_error);
    for (const auto& [shape, p] : o.peer_shapes) {
        ShapePair& mine = peer_shapes[shape];
        mine.calls += p.calls, mine.reused += p.reused, mine.peer_reused += p.peer_reused;
    }
    change_decodes += o.change_decodes;
    data_blind += o.data_blind;
    independent_blind += o.independent_blind;
    blind_same_weights_reload += o.blind_same_weights_reload;
    max_logit_error = std::max(max_logit_error, o.max_logit_error);
}

std::string OracleReport::describe() const {
    auto one = [](const char* name, bool on, const std::string& why) {
        return cat("; ", name, on ? " on" : cat(" unavailable (", why, ")"));
    };
    return cat("  oracles: ", one("data", data, data_why_not).substr(2), one("accounting", accounting, accounting_why_not),
               accounting ? one("plan identity", plan_identity, plan_identity_why_not) : "",
               one("kv", kv, kv_why_not),
               one("weld and ledger", weld, weld_why_not), one("blocks", blocks, blocks_why_not),
               one("white box (pinned storage, poisoned dead rows, blindness counts, capacities, migrate, adapters)", white_box,
                   white_box_why_not),
               one("twin", twin, twin_why_not), one("fresh prefill", fresh, fresh_why_not),
               peer ? cat("; peer on", peer_reuse_why_not.empty() ? "" : cat(" (rows only: ", peer_reuse_why_not, ")"))
                    : "");
}

void OracleReport::all_off(const std::string& why) {
    for (bool* on : {&data, &accounting, &plan_identity, &kv, &weld, &blocks, &white_box, &twin, &fresh}) *on = false;
    for (std::string* w : {&data_why_not, &accounting_why_not, &plan_identity_why_not, &kv_why_not, &weld_why_not,
                           &blocks_why_not, &white_box_why_not, &twin_why_not, &fresh_why_not})
        *w = why;
}

}  // namespace kvweld::sim
