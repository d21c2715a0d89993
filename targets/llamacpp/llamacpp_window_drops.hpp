// The llama.cpp rule's account of the positions a sliding window's
// full-size cache (swa_full) may have lost, for the two known findings of
// b11434 that lose them (targets/llamacpp/known_findings, fixed by
// docs/findings/server/swa-full-keeps-window.patch):
//
// "swa-full-find-slot-drops-window": llama_kv_cache::find_slot takes a cell
//   held by one sequence wherever that sequence's window masks it
//   (src/llama-kv-cache.cpp:1062-1078 in b11434: is_masked_swa against
//   seq_pos_max + 1, so positions up to seq_pos_max + 1 - n_swa), whatever
//   the cache's size: in one unified cache any sequence's such cells, in a
//   stream per sequence the placed sequence's own.
// "swa-full-state-drops-window": llama_kv_cache::state_write_data leaves
//   out the cells the sequence's window masks (lines 2096-2101: positions
//   up to seq_pos_max - n_swa), so a loaded state lacks them.
//
// "prepare-purges-window": before a call is computed,
//   llama_kv_cache::prepare places its ubatches in turn to find their slots
//   and undoes that cell by cell for each slot (lines 769-826), but placing
//   a ubatch in a masked cell also purges that sequence's positions up to
//   the one overwritten (apply_ubatch, 1180-1198), cells outside the slot,
//   which are never put back: a later ubatch of the call may take cells an
//   earlier ubatch's tokens made their own window mask, and the earlier
//   ubatch is then computed without them. Named for a call where a
//   sequence's tokens in a ubatch before the last bring it past the window
//   (loose: find_slot may take free cells instead), with swa_full or not.
//
// Neither drop matters while the sequence only grows: its next token's window
// starts past them. A cut (seq_rm of a suffix, which swa_full exists to
// allow) to n tokens needs positions from n - n_swa + 1 again, and where
// one of those may be gone the sequence's rows are wrong from there on.
// The cells are followed per ubatch of the rule's split, in the call's
// token order (loose under split_equal, which reorders), and a shift drops
// a sequence from the account: nothing is named there.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <span>
#include <vector>

namespace kvweld::targets {

class WindowDrops {
public:
    static constexpr const char* kFindSlot = "swa-full-find-slot-drops-window";
    static constexpr const char* kState = "swa-full-state-drops-window";
    static constexpr const char* kPurge = "prepare-purges-window";

    // n_swa: the model's window (0: none, nothing followed); drops: its
    // cache is full-size and the release drops masked cells; purges: the
    // release's prepare leaves purged cells out; unified: one cache.
    WindowDrops(int n_swa, bool drops, bool purges, bool unified)
        : n_swa_(n_swa), drops_(drops), purges_(purges), unified_(unified) {}

    // Whether a call may purge at all: a window the release's prepare purges.
    bool may_purge() const { return n_swa_ && purges_; }
    // A call's ubatches as the memory splits it (each its tokens'
    // sequences): whether prepare may purge what an earlier one's rows need.
    bool purges(const std::vector<std::vector<int>>& ubatches) const {
        if (!may_purge() || ubatches.size() < 2) return false;
        std::map<int, int> next;
        for (const auto& [s, seq] : seqs_) next[s] = seq.next;
        for (std::size_t k = 0; k + 1 < ubatches.size(); ++k) {
            for (int s : ubatches[k]) ++next[s];
            for (int s : ubatches[k]) {
                const bool later = unified_ || std::any_of(ubatches.begin() + long(k) + 1, ubatches.end(), [&](const auto& u) {
                                       return std::find(u.begin(), u.end(), s) != u.end();
                                   });
                if (later && seqs_.count(s) && next[s] >= n_swa_) return true;
            }
        }
        return false;
    }

    // Before a ubatch's find_slot: `ubatch` holds a sequence per token.
    void placing(std::span<const int> ubatch) {
        if (!n_swa_) return;
        if (drops_)
            for (auto& [s, seq] : seqs_)
                if (unified_ || std::find(ubatch.begin(), ubatch.end(), s) != ubatch.end())
                    seq.slot_below = std::max(seq.slot_below, seq.next - n_swa_ + 1);
        for (int s : ubatch)
            if (const auto it = seqs_.find(s); it != seqs_.end()) ++it->second.next;
    }
    // A cut to n tokens: the clause whose loss its next window meets, or nullptr.
    const char* cut(int seq, int n) {
        const auto it = seqs_.find(seq);
        if (!n_swa_ || !drops_ || it == seqs_.end()) return nullptr;
        Seq& s = it->second;
        const int needed = std::max(0, n - n_swa_ + 1);
        s.next = n;
        return needed < s.state_below ? kState : needed < s.slot_below ? kFindSlot : nullptr;
    }
    void emptied(int seq) { seqs_[seq] = Seq{}; }
    void all_emptied() {
        for (auto& [s, seq] : seqs_) seq = Seq{};
    }
    void unknown(int seq) { seqs_.erase(seq); }  // its positions moved
    void unplaced(int seq, int n) {
        if (const auto it = seqs_.find(seq); it != seqs_.end()) it->second.next -= n;
    }
    void copied(int src, int dst) {
        if (const auto it = seqs_.find(src); it != seqs_.end()) seqs_[dst] = it->second;
        else seqs_.erase(dst);
    }
    void saved(int seq, int id) {
        const auto it = seqs_.find(seq);
        if (it == seqs_.end()) return void(states_.erase(id));
        Seq s = it->second;
        if (drops_) s.state_below = std::max(s.state_below, s.next - n_swa_);
        states_[id] = s;
    }
    // A state loaded into seq (its next position `next`).
    void loaded(int seq, int id, int next) {
        const auto it = states_.find(id);
        if (it == states_.end()) return unknown(seq);
        seqs_[seq] = it->second;
        seqs_[seq].next = next;
    }
    std::optional<int> next(int seq) const {
        const auto it = seqs_.find(seq);
        return it == seqs_.end() ? std::nullopt : std::optional<int>(it->second.next);
    }

private:
    struct Seq {
        int next = 0;         // the next position
        int slot_below = 0;   // positions below it find_slot may have taken
        int state_below = 0;  // positions below it a loaded state lacked
    };
    int n_swa_;
    bool drops_, purges_, unified_;
    std::map<int, Seq> seqs_;    // the sequences followed, from their emptying on
    std::map<int, Seq> states_;  // by saved state id
};

}  // namespace kvweld::targets
