// The text report of a run: seed and config first, verdict last, and the
// rows a swarm's table shares with it (sim/run.hpp).
#include "sim/run.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/ddmin.hpp"
#include "sim/op_table.hpp"
#include "sim/jsonl.hpp"
#include "sim/known_findings.hpp"
#include "sim/report.hpp"
#include "sim/seed_pool.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace kvweld::sim {

namespace {

// kvweld diff's: the same seed alone, both engines as they ran.
std::string diff_command(const SimConfig& c, int steps) {
    const PeerChoice& p = *c.engine.peer;
    std::string cmd = cat("kvweld diff --engine ", c.engine.engine, " --engine ", p.engine, " --seeds ", c.seed, "..",
                          c.seed, " --steps ", steps, " --model ", c.model_name);
    if (!c.engine.params.empty()) cmd += cat(" --params ", c.engine.params);
    if (p.params != c.engine.params) cmd += cat(" --params-b '", p.params, "'");
    if (c.engine.seqs) cmd += cat(" --seqs ", c.engine.seqs);
    if (c.engine.n_ctx) cmd += cat(" --n-ctx ", c.engine.n_ctx);
    for (const std::string& f : abi::split_list(c.engine.faults.c_str())) cmd += cat(" --fault ", f);
    for (const std::string& f : abi::split_list(p.faults.c_str())) cmd += cat(" --fault-b ", f);
    if (p.tolerance != PeerChoice{}.tolerance) cmd += cat(" --tolerance ", p.tolerance);
    return cmd;
}

}  // namespace

std::string reproduce_command(const SimConfig& c, int steps) {
    if (c.engine.peer) return diff_command(c, steps);
    std::string cmd = cat("kvweld sim --engine ", c.engine.engine, " --seed ", c.seed, " --steps ", steps,
                          " --model ", c.model_name);
    if (!c.engine.params.empty()) cmd += cat(" --params ", c.engine.params);
    if (c.engine.seqs) cmd += cat(" --seqs ", c.engine.seqs);
    if (c.engine.n_ctx) cmd += cat(" --n-ctx ", c.engine.n_ctx);
    if (!c.engine.faults.empty()) cmd += cat(" --fault ", c.engine.faults);
    if (c.engine.twin) cmd += " --twin";
    // Where the engine ran, where the run chose (a crash in kvweld's process ends it).
    const targets::Isolation& where = c.engine.isolation;
    if (where.isolate != targets::Isolate::engine_default)
        cmd += where.isolate == targets::Isolate::yes ? " --isolate yes" : " --isolate no";
    if (where.isolate != targets::Isolate::no && where.call_timeout_ms != targets::Isolation{}.call_timeout_ms)
        cmd += cat(" --call-timeout ", where.call_timeout_ms / 1000.0);
    return cmd;
}

namespace {

std::string plans_text(std::uint64_t reused, std::uint64_t builds, std::uint64_t rebinds) {
    return cat(reused, " / ", builds, " / ", rebinds, " (reuse ", fixed(counted_reuse_ratio(reused, builds, rebinds), 4), ")");
}

// The reuse condition's coverage: per term the plan pairs where it changed
// alone, changed with others and held; the terms never exercised; those
// out of the API's reach.
std::string terms_rows(const RunStats& s) {
    if (s.terms.empty()) return "";
    std::string counts, never, unreachable;
    for (const auto& [name, t] : s.terms) {
        counts += cat(counts.empty() ? "" : ", ", name, " ", t.alone, "/", t.changed - t.alone, "/", t.held);
        if (!t.exercised()) never += cat(never.empty() ? "" : ", ", name);
    }
    for (const auto& [name, why] : s.terms_unreachable)
        if (!s.terms.count(name))  // reachable in another seed's settings
            unreachable += cat(unreachable.empty() ? "" : "; ", name, " (", why, ")");
    return table_row("reuse terms (alone/with others/held)", counts) +
           table_row("reuse terms never exercised", never.empty() ? "none" : never) +
           (unreachable.empty() ? "" : table_row("reuse terms out of reach", unreachable));
}

}  // namespace

std::string stats_rows(const RunStats& s, const OracleReport& oracles) {
    const bool accounting = oracles.accounting;
    std::string out;
    std::string kinds;
    for (int k = 0; k < kOpKinds; ++k)
        if (s.ops_by_kind[std::size_t(k)])
            kinds += cat(kinds.empty() ? "" : " ", to_string(OpKind(k)), "=", s.ops_by_kind[std::size_t(k)]);
    out += table_row("ops run", cat(s.ops_run, " (", kinds, ")"));
    std::string variants;
    for (const auto& [name, n] : s.variants) variants += cat(variants.empty() ? "" : " ", name, "=", n);
    if (!variants.empty()) out += table_row("op variants", variants);
    out += table_row("requests / engine calls", cat(s.requests, " / ", s.calls, " (", s.batched_calls, " batched, ",
                                                    s.same_shape_calls, " of the last call's shape)"));
    out += table_row("rows / by the reference (max logit / K/V error)",
                     cat(s.rows, " / ", s.reference_rows, " (", oracles.data ? sci(s.max_logit_error) : "-", " / ",
                         oracles.kv ? sci(s.max_kv_error) : "-", ")"));
    if (s.embedding_rows)
        out += table_row("embeddings by the reference (max error)",
                         cat(s.embedding_rows, " (", sci(s.max_embedding_error), ")"));
    if (s.routing_tie_rows)
        out += table_row("rows left unjudged: MoE routing ties", cat(s.routing_tie_rows));
    if (s.non_causal_spans)
        out += table_row("non-causal spans by the reference (tokens)", cat(s.non_causal_spans, " (", s.non_causal_tokens, ")"));
    if (s.sampled_rows || s.sampled_compared)
        out += table_row("sampled tokens: by the reference / equal to the second engine's",
                         cat(s.sampled_rows, " / ", s.sampled_compared));
    out += table_row("drafts (rejected)", cat(s.drafts, " (", s.rejected, ")"));
    if (s.aborted_calls)
        out += table_row("calls aborted (tokens kept of those fed; not judged)",
                         cat(s.aborted_calls, " (", s.aborted_kept, " of ", s.aborted_fed, "; ", s.unjudged_aborted, ")"));
    out += table_row("invalid calls refused", cat(s.refused));
    if (s.memory_refused) out += table_row("rewinds and shifts the memory refused (may)", cat(s.memory_refused));
    if (oracles.twin)
        out += table_row("rows equal to the twin's", cat(s.twin_rows, s.twin_within_tolerance ? cat(" (", s.twin_within_tolerance,
                                                                      " within the engine's declared tolerance)") : ""));
    if (oracles.fresh)
        out += table_row("rows by a fresh prefill (max logit error; unjudged)",
                         cat(s.fresh_rows, " (", s.max_fresh_error, "; ", s.fresh_unjudged, ")"));
    if (oracles.peer) {
        out += peer_rows(s, oracles);
    } else if (!accounting && s.reused + s.builds + s.rebinds > 0) {
        out += table_row("plans as the engine counted them (no rule)",
                         cat("reused ", s.reused, ", built ", s.builds, ", rebound ", s.rebinds, " (reuse ",
                             fixed(s.counted_reuse_ratio(), 4), ")"));
    }
    if (accounting) {
        out += table_row("plans run / reused", cat(s.plans, " / ", s.reused));
        out += table_row("reuse ratio (rule's ideal)", cat(fixed(s.reuse_ratio(), 4), " (", fixed(s.ideal_ratio(), 4),
                                                     s.may_reuse ? cat(", +", s.may_reuse, " allowed") : "", ")"));
        out += table_row("reuse required (of a shared plan)", cat(s.must_reuse, " (", s.must_reuse_shared, ")"));
        out += terms_rows(s);
    }
    if (oracles.white_box)
        out += cat("blind spots: ", s.change_decodes, " decodes after a storage/model change; ", s.data_blind,
                   " blind to the data oracle; ", s.independent_blind,
                   " blind to data and kv (every oracle that reads no engine report), ", s.blind_same_weights_reload,
                   " of them after a same-weights reload\n");
    return out;
}

std::string failure_line(const RunResult& r) {
    if (r.verdict == Verdict::reuse_differs && r.failure)  // its detail says it all
        return cat("verdict: FAIL reuse_differs from op ", r.failure->op_index, ": ", r.failure->detail);
    std::string out = cat("verdict: FAIL ", to_string(r.verdict));
    if (r.failure)
        out += cat(" at op ", r.failure->op_index, " (", r.failure->op, ", ", to_string(r.failure->oracle),
                   " oracle): ", r.failure->detail,
                   r.failure->clause.empty() ? "" : cat(" [the call's contract clause: ", r.failure->clause, "]"));
    return out;
}

std::string join_list(const std::vector<std::string>& items, std::string_view sep) {
    std::string out;
    for (const std::string& item : items) out += cat(out.empty() ? "" : sep, item);
    return out;
}

std::string peer_rows(const RunStats& s, const OracleReport& oracles) {
    std::string out = table_row("rows compared with the peer's (max logit error)",
                                cat(s.peer_rows, " (", sci(s.max_peer_error), ")"));
    if (!oracles.peer_reuse_why_not.empty()) return out;
    out += table_row("plans reused / built / rebound: A", plans_text(s.reused, s.builds, s.rebinds));
    out += table_row("plans reused / built / rebound: B", plans_text(s.peer_reused, s.peer_builds, s.peer_rebinds));
    return out + table_row("calls prepared differently", cat(s.reuse_diffs(), " (A reused more ", s.reuse_more, ", fewer ",
                                                            s.reuse_fewer, ", as many but built or rebound otherwise ",
                                                            s.prepared_otherwise, ")"));
}

std::string reuse_diff_lines(const RunResult& r, std::size_t most) {
    std::string out;
    for (std::size_t i = 0; i < r.reuse_diffs.size() && i < most; ++i) {
        const ReuseDiff& d = r.reuse_diffs[i];
        out += cat("  prepared differently: op ", d.op_index, " (", d.op, ", a ", d.shape, " batch",
                   d.before.empty() ? "" : cat(", after ", d.before), "): the engine reused ", d.engine.reused, ", built ",
                   d.engine.built, ", rebound ", d.engine.rebound, "; the peer reused ", d.peer.reused, ", built ",
                   d.peer.built, ", rebound ", d.peer.rebound, "\n");
    }
    const std::uint64_t all = r.stats.reuse_diffs();
    if (all > most && !r.reuse_diffs.empty())
        out += cat("  ... ", all - std::min<std::uint64_t>(all, most), " more such calls",
                   all > r.reuse_diffs.size() ? cat(" (a run keeps the first ", r.reuse_diffs.size(), ")") : "", "\n");
    return out;
}



std::string text_report(const RunResult& r) {
    std::string out = cat("seed ", r.config.seed, ", ", r.ops.size(), " of ", r.steps, " ops\n", r.config.describe(),
                          "\n", r.oracles.describe(), "\n");
    out += stats_rows(r.stats, r.oracles);
    out += reuse_diff_lines(r, 10);
    if (!r.ended_early.empty()) out += cat("ended early: ", r.ended_early, "\n");
    if (r.verdict == Verdict::pass) return out + "verdict: PASS\n";
    const std::string steer = r.steered_past.empty() ? "" : cat(" --steer ", join_list(r.steered_past, ","));
    return out + failure_line(r) + cat("\n  reproduce: ", reproduce_command(r.config, r.steps), steer, "\n");
}

}  // namespace kvweld::sim
