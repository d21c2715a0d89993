// The llama.cpp rule's account of sequences whose K/V rows an earlier op
// left wrong in llama.cpp 0.3.36 (targets/llamacpp/known_findings): not
// contract clauses but the conditions the known findings below need, so that
// every call decoding such a sequence names one and a failure there is
// matched to its finding, never hidden among others. Each is read off the
// source at the line the finding cites:
//
// "state-io-under-queued-copy": with one stream per sequence, seq_cp
//   copies the cells' metadata at once and queues the K/V buffer copy for
//   the next decode's memory update (src/llama-kv-cache.cpp:508-511); state
//   save and load touch the buffers at once. A state saved from the copy's
//   destination before then holds its old rows; one loaded into the
//   destination is overwritten by the copy; one loaded into the source is
//   copied into the destination under the old metadata.
// "state-saved-before-k-shift": seq_add moves a cell's position at once
//   and queues its K rotation for the next decode (llama_kv_cells::pos_add;
//   the K-shift in llama_kv_cache::update); a state saved before then holds
//   the new positions with the old rotation, and the load drops the owed
//   rotation (state_read_meta places fresh cells).
// "shift-moves-shared-cells": with a unified cache, seq_cp shares cells
//   between sequences (llama_kv_cells::seq_add at line 487), and seq_add
//   moves a cell for every sequence in it (line 607): a shift of one moves
//   the rows of every sequence it shares them with. Sharing is tracked
//   loosely (from a copy until the sequence is emptied or loaded), so the
//   clause may name a sequence that no longer shares a moved cell.
// "kshift-aborted": the K-shift runs as a graph at the start of the next
//   decode (llama_kv_cache::update, lines 864-891), and the abort callback
//   is asked after each of its nodes too: a stop there returns before
//   reset_shift with the layers already rotated in place, and the next
//   decode rotates every layer again. The rule cannot tell where the
//   callback stopped, so the clause names every sequence with a rotation
//   owed at an aborted call. A copy of a sequence with a rotation owed
//   owes it too: within a stream the cells (and their shift) are shared
//   (seq_cp, src/llama-kv-cache.cpp:504-506 in b11434), and across
//   streams the destination's cells get the source's pending shift
//   (lines 536-548: pos_set of the unshifted position, then pos_add of the
//   shift) over a buffer copied raw before the K-shift runs (update, lines
//   845-875): seed 3596 of the 5000-seed swarm.
// "non-causal-split": with causal attention off and one stream per
//   sequence, split_equal splits a call whose sequences feed unequal counts
//   (llama-batch.cpp:542-640), and a sequence's tokens in an earlier ubatch
//   never attend to its tokens in a later one: their rows, and their K/V
//   past the first layer, are not what one ubatch computes.
// "rollback-moves-copy": a recurrent state (mamba, lfm2) is one cell per
//   sequence, and seq_cp shares the source's cell with the destination
//   (src/llama-memory-recurrent.cpp:250-280 in b11434); a rollback of one
//   of them within its n_rs_seq snapshots moves that cell's position
//   (lines 200-210) for every sequence in it, while the snapshot index it
//   sets (rs_idx) is the rolled-back sequence's alone: the others now hold
//   a position the caller never asked for, over their old state.
// "shift-moves-copy": a context shift's seq_add on a recurrent state moves
//   the position of the sequence's tail cell (src/llama-memory-recurrent.cpp:
//   354 in b11434), the cell seq_cp shares: every sequence in it moves
//   with it, though the caller shifted one.
// "aborted-decode-keeps-position": a decode the abort callback stops
//   removes the stopped ubatch's positions with seq_rm
//   (src/llama-context.cpp:1895-1916 in b11434), which a recurrent state
//   refuses for a suffix (llama-memory-recurrent.cpp:200-216), and the
//   result is not checked: the state's position stays at the stopped
//   ubatch's last token, over a state that never took it (in full). With
//   rollback snapshots (n_rs_seq) the removal is taken instead, and
//   restores a snapshot the stopped ubatch was writing: either way the
//   state is not what the finished ubatches left.
// "rollback-whole-last-decode": the snapshots a decode keeps are of its
//   own tokens (the newest min(n_seq_tokens, n_rs_seq + 1), written by the
//   recurrent op; src/llama-memory-recurrent.cpp:200-216 accepts any rewind
//   up to n_rs_seq), so a rewind of every token the last decode gave the
//   sequence, or more, restores a slot that decode never wrote (llama.cpp
//   #26695).
// "rollback-after-reorder": find_slot makes a ubatch's state cells
//   contiguous by swapping cell metadata with the cells in the way
//   (src/llama-memory-recurrent.cpp:639-662 in b11434), which may hold a
//   sequence the ubatch does not decode; its rollback snapshots stay in its
//   old cell's rows (read at rs_idx * size + src0, lines 1364-1381), which
//   the ubatch overwrites, and seq_rm still takes its rollback. The cells
//   are not modelled: a sequence counts as maybe moved from a ubatch that
//   decodes two or more other sequences (a later call's, or a later ubatch
//   of its own call, where two others feed more tokens than it) until it
//   decodes again, and the clause names only the call right after the
//   rollback (a restored snapshot that is another's is off at once). Loose:
//   of 110 seeds it named, 14 failed the same way on the fixed build
//   (docs/FINDINGS.md).
// "copy-after-rollback": the same index is per sequence, so a copy made
//   between a rollback and the next decode shares the cell but not the
//   pending index: it decodes from the state before the rollback.
// "seq-keep-other-streams": with one stream per sequence,
//   llama_kv_cache::seq_keep scans only the kept sequence's own stream
//   (src/llama-kv-cache.cpp:543-567 in 0.3.36), so every other sequence
//   keeps its cells: its next token at the position its emptied history
//   says is refused (llama_batch_allocr::init's position check).
// "swa-full-find-slot-drops-window", "swa-full-state-drops-window": a cut
//   into the positions a full-size window cache gave away;
//   "prepare-purges-window": a call whose dry run purges positions its own
//   earlier ubatch needs (both in llamacpp_window_drops.hpp).
#pragma once

#include "targets/llamacpp/llamacpp_window_drops.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace kvweld::targets {

class WrongRows {
public:
    // keep_every_stream: the release's seq_keep clears every stream (a
    // checked fix, docs/findings/seq-keep-other-streams.patch);
    // shift_unshares: its seq_add copies shared cells before moving them
    // (docs/findings/shift-copies-shared-cells.patch).
    // Whether the memory keeps a recurrent state (arch=mamba, lfm2,
    // lfm2_swa), and whether its seq_cp gives a copy the pending rollback
    // (a checked fix, docs/findings/copy-after-rollback.patch).
    enum class Recurrent { no, yes, copies_rollback };
    // kv_cache: it has a llama_kv_cache (every one but mamba's), whose
    // findings above are the KV cache's own: a memory without one is never
    // named under them.
    // window: the account of a sliding window's cells (WindowDrops).
    WrongRows(bool unified, bool keep_every_stream, bool shift_unshares, Recurrent recurrent, bool kv_cache, WindowDrops window)
        : window_(std::move(window)), unified_(unified), keep_every_stream_(keep_every_stream), shift_unshares_(shift_unshares),
          recurrent_(recurrent != Recurrent::no), copy_keeps_rollback_(recurrent == Recurrent::copies_rollback),
          kv_cache_(kv_cache) {}

    // The clause a call decoding `seqs` carries (nullptr: none). A
    // sequence whose cells seq_keep left is named first: llama_decode
    // refuses the whole call for it, before any other row is computed.
    const char* clause(std::span<const int> seqs) const {
        for (int s : seqs)
            if (const auto it = wrong_.find(s); it != wrong_.end() && std::string_view(it->second) == kKeepOtherStreams) return it->second;
        for (int s : seqs)
            if (const auto it = wrong_.find(s); it != wrong_.end()) return it->second;
        return nullptr;
    }
    const char* state_clause(int id) const {
        const auto it = states_.find(id);
        return it == states_.end() ? nullptr : it->second;
    }
    void aborted() {  // a decode the abort callback stopped, maybe inside the K-shift
        for (int seq : shifted_) mark_kv(seq, "kshift-aborted");
    }
    void split(int seq) { mark_kv(seq, "non-causal-split"); }
    // A sequence fed by a call the abort callback stopped.
    void stopped_in(int seq) {
        if (recurrent_) mark(seq, "aborted-decode-keeps-position");
    }
    void decoded() {  // the memory update ran: copies and rotations done, rollbacks applied
        queued_.clear();
        shifted_.clear();
        rolled_back_.clear();
    }
    // Sequences a call decodes: each that shares its recurrent state cell
    // gets a cell of its own (llama_memory_recurrent::find_slot copies it),
    // and rollback-after-reorder's clause, this call's, is spent.
    void decoding(std::span<const int> seqs) {
        for (int seq : seqs)
            if (const auto it = wrong_.find(seq); it != wrong_.end() && std::string_view(it->second) == kReorder) wrong_.erase(it);
        for (int seq : seqs) {
            for (int other : state_sharing_[seq]) state_sharing_[other].erase(seq);
            state_sharing_.erase(seq);
        }
    }
    // A rewind to `n` tokens a recurrent state took (within its
    // snapshots): the sequences sharing its cell moved with it, and a
    // rewind of the whole last decode or more restores a snapshot that
    // decode never wrote.
    void rolled_back(int seq, int n) {
        if (const char* lost = window_.cut(seq, n)) mark_kv(seq, lost);
        const auto held = held_.find(seq), last = last_decode_.find(seq);
        const bool whole_last = held != held_.end() && last != last_decode_.end() && held->second - n >= last->second;
        if (held != held_.end()) held->second = n;
        if (!recurrent_) return;
        for (int other : state_sharing_[seq]) mark(other, "rollback-moves-copy");
        rolled_back_.insert(seq);
        if (whole_last) mark(seq, "rollback-whole-last-decode");
        if (maybe_moved_.count(seq)) mark(seq, kReorder);
    }
    // A call decoded `seqs` (one entry per token): each one's tokens in it,
    // and what it holds after it where that is known.
    void last_decode(std::span<const int> seqs) {
        std::map<int, int> tokens_of;
        for (int s : seqs) ++tokens_of[s];
        if (recurrent_) reordered(tokens_of);
        for (const auto& [s, n] : tokens_of) {
            last_decode_[s] = n;
            if (const auto it = held_.find(s); it != held_.end()) it->second += n;
        }
    }
    // What a sequence holds is no longer followed (a shift, a state load, a
    // stopped call): no rewind of it is judged whole until it is emptied.
    void length_unknown(int seq) { held_.erase(seq); }
    void placing(std::span<const int> ubatch) { window_.placing(ubatch); }  // before a ubatch's find_slot
    bool may_purge() const { return window_.may_purge(); }
    bool purges(const std::vector<std::vector<int>>& ubatches) const { return window_.purges(ubatches); }
    // n of the tokens placed for seq were removed again (a stopped call's).
    void unplaced(int seq, int n) { window_.unplaced(seq, n); }
    void copied(int src, int dst) {
        emptied(dst);
        window_.copied(src, dst);
        if (maybe_moved_.count(src)) maybe_moved_.insert(dst);
        if (!unified_) queued_.push_back({src, dst});
        if (const auto it = wrong_.find(src); it != wrong_.end()) wrong_[dst] = it->second;
        if (recurrent_) {
            for (int other : state_sharing_[src]) share_state(other, dst);
            share_state(src, dst);
            if (const auto it = last_decode_.find(src); it != last_decode_.end()) last_decode_[dst] = it->second;
            if (const auto it = held_.find(src); it != held_.end()) held_[dst] = it->second;
            else held_.erase(dst);
            if (rolled_back_.count(src) && !copy_keeps_rollback_) mark(dst, "copy-after-rollback");
        }
        if (shifted_.count(src)) shifted_.insert(dst);
        if (!unified_) return;
        for (int other : sharing_[src]) share(other, dst);
        share(src, dst);
    }
    void shifted(int seq, bool moved) {
        length_unknown(seq);
        window_.unknown(seq);
        if (!moved) return;
        if (recurrent_)
            for (int other : state_sharing_[seq]) mark(other, "shift-moves-copy");
        shifted_.insert(seq);
        if (shift_unshares_) return;  // the moved cells are its own copies: the others keep theirs
        for (int other : sharing_[seq]) mark_kv(other, "shift-moves-shared-cells");
    }
    bool shares(int seq) const {
        const auto it = sharing_.find(seq);
        return it != sharing_.end() && !it->second.empty();
    }
    void saved(int seq, int id) {
        window_.saved(seq, id);
        if (const auto it = wrong_.find(seq); it != wrong_.end()) states_[id] = it->second;
        else if (kv_cache_ && copy_queued_onto(seq)) states_[id] = "state-io-under-queued-copy";
        else if (kv_cache_ && shifted_.count(seq)) states_[id] = "state-saved-before-k-shift";
    }
    // A state loaded into seq, which now holds `len` tokens.
    void loaded(int seq, int id, int len) {
        emptied(seq);
        length_unknown(seq);
        window_.loaded(seq, id, len);
        if (const auto it = states_.find(id); it != states_.end()) wrong_[seq] = it->second;
        if (kv_cache_ && copy_queued_onto(seq)) wrong_[seq] = "state-io-under-queued-copy";
        // The queued copies run in their order at the next memory update, so
        // a copy of a copy of the loaded sequence gets the loaded rows too
        // (1 -> 3, 3 -> 0, 0 -> 3, then a load into 1: 3 and 0 are wrong).
        std::set<int> tainted{seq};
        for (const auto& [src, dst] : queued_)
            if (tainted.count(src) && dst != seq) {
                tainted.insert(dst);
                mark_kv(dst, "state-io-under-queued-copy");
            }
    }
    void put_back(int seq) {  // saved and loaded again at once
        constexpr int kNow = -1;  // no simulator state has this id
        const int len = window_.next(seq).value_or(0);  // unfollowed: the state is too
        saved(seq, kNow);
        loaded(seq, kNow, len);
        states_.erase(kNow);
    }
    // Its cells freed (clear, close, truncate to 0, the target of a copy or load).
    void emptied(int seq) {
        wrong_.erase(seq);
        shifted_.erase(seq);  // no cell of it is left to rotate
        rolled_back_.erase(seq);
        for (int other : sharing_[seq]) sharing_[other].erase(seq);
        sharing_.erase(seq);
        for (int other : state_sharing_[seq]) state_sharing_[other].erase(seq);
        state_sharing_.erase(seq);
        last_decode_.erase(seq);
        maybe_moved_.erase(seq);
        held_[seq] = 0;
        window_.emptied(seq);
    }
    // Every sequence but one emptied by seq_keep: with one stream per
    // sequence, the others' cells stay (seq-keep-other-streams).
    void kept(std::span<const int> others) {
        for (int s : others) {
            emptied(s);
            if (kv_cache_ && !unified_ && !keep_every_stream_) wrong_[s] = kKeepOtherStreams;
        }
    }
    // clear_all (the queued copies stay queued: llama_kv_cache::clear
    // leaves sc_info) or a reload (a new context: nothing queued).
    void all_emptied(bool new_context) {
        wrong_.clear();
        sharing_.clear();
        state_sharing_.clear();
        last_decode_.clear();
        maybe_moved_.clear();
        for (auto& [s, n] : held_) n = 0;
        window_.all_emptied();
        rolled_back_.clear();
        shifted_.clear();
        if (new_context) queued_.clear();
    }

private:
    static constexpr const char* kKeepOtherStreams = "seq-keep-other-streams";
    static constexpr const char* kReorder = "rollback-after-reorder";  // the next call's alone
    // A sequence's rows are wrong from the first op that left them so: it
    // keeps that clause until it is emptied (a later one does not make them
    // wrong again; on a fixed build the later may be a fixed finding's own
    // precondition met over them). seq_keep's is set over it (kept): its
    // next token is refused whatever else is wrong with it.
    void mark(int seq, const char* clause) { wrong_.try_emplace(seq, clause); }
    void mark_kv(int seq, const char* clause) {  // a finding of llama_kv_cache's
        if (kv_cache_) mark(seq, clause);
    }
    void share(int a, int b) {
        if (a == b) return;
        sharing_[a].insert(b);
        sharing_[b].insert(a);
    }
    // The sequences a call may have moved out of the way (rollback-after-reorder).
    void reordered(const std::map<int, int>& tokens_of) {
        for (const auto& [s, n] : last_decode_)
            if (!tokens_of.count(s) && tokens_of.size() >= 2) maybe_moved_.insert(s);
        for (const auto& [s, fed] : tokens_of) {
            const int n = fed;  // a structured binding is not captured before C++20's clang 16
            const auto longer = std::count_if(tokens_of.begin(), tokens_of.end(), [n](const auto& o) { return o.second > n; });
            if (longer >= 2) maybe_moved_.insert(s);
            else maybe_moved_.erase(s);
        }
    }
    void share_state(int a, int b) {
        if (a == b) return;
        state_sharing_[a].insert(b);
        state_sharing_[b].insert(a);
    }
    WindowDrops window_;
    bool unified_, keep_every_stream_, shift_unshares_, recurrent_, copy_keeps_rollback_, kv_cache_;
    std::map<int, std::set<int>> state_sharing_;  // recurrent: sequences sharing one state cell (since a copy)
    std::map<int, int> last_decode_;  // recurrent: each sequence's tokens in the last call that decoded it
    std::map<int, int> held_;         // the tokens a sequence holds, where followed (from its emptying on)
    std::set<int> rolled_back_;                   // recurrent: rewound since the last decode
    std::set<int> maybe_moved_;                   // recurrent: its state cell maybe moved since it decoded
    std::map<int, const char*> wrong_;   // sequence -> the clause its rows are wrong under
    std::map<int, const char*> states_;  // saved state id -> the clause it was saved wrong under
    bool copy_queued_onto(int seq) const {
        return std::any_of(queued_.begin(), queued_.end(), [&](const auto& c) { return c.second == seq; });
    }
    std::vector<std::pair<int, int>> queued_;  // stream copies since the last decode, in order: (source, destination)
    std::set<int> shifted_;              // sequences with a K rotation owed since the last decode
    std::map<int, std::set<int>> sharing_;  // unified: sequences that may share cells
};

}  // namespace kvweld::targets
