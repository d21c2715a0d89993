// What a run counted (RunStats: every observer adds its own counts) and
// which oracles ran (OracleReport), for reports and the swarm's sums.
#pragma once

#include "sim/ops.hpp"

#include <array>
#include <map>
#include <string>
#include <cstdint>
#include <string>

namespace kvweld::sim {

// reused / (reused + builds + rebinds), 0 when nothing was counted.
inline double counted_reuse_ratio(std::uint64_t reused, std::uint64_t builds, std::uint64_t rebinds) {
    const std::uint64_t all = reused + builds + rebinds;
    return all ? double(reused) / double(all) : 0.0;
}

struct RunStats {
    std::uint64_t ops_run = 0;
    std::uint64_t ops_skipped = 0;  // precondition did not hold (replay of shrunk traces)
    std::array<std::uint64_t, kOpKinds> ops_by_kind{};  // of ops_run
    std::map<std::string, std::uint64_t> variants;      // "kind.variant" (sim/ops.hpp Variant): times it took effect
    std::uint64_t requests = 0;
    std::uint64_t calls = 0;        // engine decode calls
    std::uint64_t rows = 0;         // rows of logits decoded (one per token fed)
    std::uint64_t reference_rows = 0;  // of them, checked against the reference (the data oracle)
    std::uint64_t batched_calls = 0;  // calls carrying more than one sequence
    std::uint64_t same_shape_calls = 0;  // calls whose batch is the last call's (same sequences, order and outputs)
    std::uint64_t drafts = 0, rejected = 0;
    // ABI 12: calls the abort callback stopped (of `calls`), the tokens they
    // were given and those the engine kept, and those of them the rule did
    // not judge (an engine that stops inside a plan it prepared).
    std::uint64_t aborted_calls = 0, aborted_fed = 0, aborted_kept = 0, unjudged_aborted = 0;
    std::uint64_t refused = 0;      // invalid calls the engine refused, naming the bad value
    std::uint64_t memory_refused = 0;  // calls the engine's memory may refuse (a recurrent rewind), refused
    std::uint64_t twin_rows = 0;    // rows compared with the twin's
    std::uint64_t twin_within_tolerance = 0;  // of them, not bitwise equal but within the engine's declared tolerance
    // The fresh-prefill oracle: rows judged, rows it could not (a sequence
    // holding rows of other adapters or of a non-causal span, or with a
    // sampler chain), and the largest error it saw.
    std::uint64_t fresh_rows = 0, fresh_unjudged = 0;
    double max_fresh_error = 0.0;
    // accounting, over the calls the rule judged
    std::uint64_t plans = 0;       // plans the rule says the calls ran
    std::uint64_t reused = 0;      // reuses the engine counted
    std::uint64_t must_reuse = 0;  // reuses the rule required
    std::uint64_t must_reuse_shared = 0;  // of them, of a plan serving several sequences
    std::uint64_t may_reuse = 0;   // reuses the rule allowed without requiring
    std::map<std::string, std::uint64_t> may_reuse_why;  // of them, per clause that could not require them
    std::string may_reuse_why_text() const;  // "why (n); ...", empty where none
    std::uint64_t builds = 0, rebinds = 0;  // what the engine counted besides reuses (with or without a rule)
    // kvweld diff: the peer's counts, its rows compared, and the calls
    // where the two prepared their plans differently: the engine reused more
    // than the peer, fewer, or as many but built and rebound otherwise.
    std::uint64_t peer_reused = 0, peer_builds = 0, peer_rebinds = 0, peer_rows = 0;
    std::uint64_t reuse_more = 0, reuse_fewer = 0, prepared_otherwise = 0;
    double max_peer_error = 0.0;
    // kvweld diff, per class of batch shape (batch_shape: "8x1-3"): the
    // calls, and the graphs each engine reused in them.
    struct ShapePair {
        std::uint64_t calls = 0, reused = 0, peer_reused = 0;
    };
    std::map<std::string, ShapePair> peer_shapes;
    // White box, the blind spots: decodes right after a storage or model
    // change (the plan was prepared before it) where a plan that missed the
    // change would give the very same logits (data_blind), and also leave
    // the right K/V rows in the storage the sequence holds (independent_blind:
    // no oracle that reads data could see it). Of those, how many follow a
    // reload of identical weights with the storage untouched, where a missed
    // plan is exactly right and only the accounting oracle can call it missed.
    std::uint64_t change_decodes = 0, data_blind = 0, independent_blind = 0, blind_same_weights_reload = 0;
    double max_logit_error = 0.0;
    double max_kv_error = 0.0;
    // With the live setting embeddings on (ABI 10): output rows whose
    // embeddings were read back and judged against the reference.
    std::uint64_t embedding_rows = 0;
    // With causal attention off (the live setting causal_attn=0): a
    // sequence's tokens of one call, two or more, judged as one span.
    std::uint64_t non_causal_spans = 0, non_causal_tokens = 0;
    // MoE: output rows left unjudged by the reference (and their K/V by the
    // kv oracle) because a routing tie lies in what they attend to
    // (engine/reference.hpp kRoutingTieMargin).
    std::uint64_t routing_tie_rows = 0;
    std::uint64_t sampled_rows = 0;      // ABI 11: rows judged by their sampled token
    std::uint64_t sampled_compared = 0;  // rows whose sampled token the twin or peer gave too
    double max_embedding_error = 0.0;
    // The reuse condition's coverage (ReuseRule::terms): per term, the
    // consecutive plan pairs where it changed, changed alone and held; and
    // the terms the engine's API cannot change, each with why.
    struct TermCount {
        bool tied = false;
        std::uint64_t changed = 0, alone = 0, held = 0;
        bool exercised() const { return tied ? changed > 0 : alone > 0; }
    };
    std::map<std::string, TermCount> terms;
    std::map<std::string, std::string> terms_unreachable;

    double reuse_ratio() const { return plans ? double(reused) / double(plans) : 0.0; }
    // Reuse as the engine counts it, where no rule says how many plans ran.
    double counted_reuse_ratio() const;
    std::uint64_t reuse_diffs() const { return reuse_more + reuse_fewer + prepared_otherwise; }
    double ideal_ratio() const { return plans ? double(must_reuse) / double(plans) : 0.0; }
    void add(const RunStats& o);
};
inline double RunStats::counted_reuse_ratio() const { return kvweld::sim::counted_reuse_ratio(reused, builds, rebinds); }

// Which oracles ran, and why the others could not.
struct OracleReport {
    bool data = true;
    bool accounting = false, weld = false, kv = false, blocks = false;
    bool plan_identity = false;  // part of accounting: counted builds against the plan serial
    // An engine in process (targets/white_box.hpp): pinned storage (kv reads
    // it, dead rows poisoned), blindness counts, capacities, migrate.
    bool white_box = false;
    // The differential twin (--twin): the same engine with plan reuse off,
    // driven in lockstep; every row must equal its row, bit for bit.
    bool twin = false;
    // kvweld diff: every row and every call's plan counts against a peer
    // engine driven in lockstep (the other oracles are off then).
    bool peer = false;
    // Where the reference cannot follow the engine: every row against a
    // fresh context's prefill of the tokens its sequence holds.
    bool fresh = false;
    std::string fresh_why_not;
    std::string peer_reuse_why_not;  // why calls' reuse could not be compared ("": it was)
    std::string accounting_why_not, weld_why_not, kv_why_not, blocks_why_not, plan_identity_why_not, data_why_not,
        white_box_why_not, twin_why_not;
    void all_off(const std::string& why);  // an unchecked run
    std::string describe() const;
};

}  // namespace kvweld::sim
