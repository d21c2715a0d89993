// llama_kv_cache's cells in one stream (a unified cache), as clause 3 of
// the rule needs them (llamacpp_rule.cpp): the cells find_slot gives each
// ubatch, the head it leaves, the cells each memory call frees, and so the
// attention window (n_kv) of every graph. Positions, sequence sets and the
// head only, never data. Read off b11434's src/llama-kv-cache.cpp and
// src/llama-kv-cells.h, the lines cited per function; 0.3.36 has the same
// code (its llama-kv-cache.cpp find_slot 898, apply_ubatch 1097, get_n_kv
// 1260). The model is checked against llama.cpp's own account of its cells
// (LLAMA_KV_CACHE_DEBUG's find_slot lines: llamacpp_kv_cells_test.cpp),
// never widened to fit it.
#pragma once

#include "targets/llamacpp/llamacpp_memory_steps.hpp"

#include <algorithm>
#include <bitset>
#include <climits>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <vector>

namespace kvweld::llamacpp {

class KvCells {
public:
    static constexpr int kMaxSeq = 256;  // LLAMA_MAX_SEQ (llama-cparams.h:8)
    static constexpr int kPad = 256;     // get_n_kv's n_pad_cur: max(n_pad, 256)
    struct Token {
        int seq, pos;
    };

    // size: the stream's cells (llama_context pads n_ctx to 256,
    // llama-context.cpp:292). unshares: seq_add first copies the cells the
    // sequence shares into empty ones (docs/findings/shift-copies-shared-cells.patch).
    KvCells(int size, bool unshares) : cells_(std::size_t(size)), unshares_(unshares) {}

    int size() const { return int(cells_.size()); }
    int used() const { return int(used_.size()); }
    int used_max_p1() const { return used_.empty() ? 0 : *used_.rbegin() + 1; }
    int head() const { return head_; }
    // get_n_kv (1280-1293): the window the graph of the last placed ubatch reads.
    int n_kv() const { return std::min(size(), std::max(kPad, (used_max_p1() + kPad - 1) / kPad * kPad)); }

    // find_slot(ubatch, cont = false) (916-1112) for each ubatch in turn, then
    // apply_ubatch (1115-1205), as llama_kv_cache::prepare and the decode
    // that follows it do. A call any of whose ubatches finds no slot places
    // nothing (llama_decode returns 1: the memory as before); false then.
    bool place(std::span<const std::span<const Token>> ubatches) {
        KvCells trial = *this;
        for (std::span<const Token> u : ubatches) {
            const std::optional<std::vector<int>> idxs = trial.find_slot(int(u.size()));
            if (!idxs) return false;
            trial.apply(*idxs, u);
        }
        *this = std::move(trial);
        return true;
    }
    // One ubatch: placed in place (find_slot changes nothing it fails on).
    bool place(std::span<const Token> ubatch) {
        const std::optional<std::vector<int>> idxs = find_slot(int(ubatch.size()));
        if (idxs) apply(*idxs, ubatch);
        return idxs.has_value();
    }

    // seq_rm (400-468): p0 < 0 is 0, p1 < 0 no end; seq < 0 any sequence.
    // The head moves back to the first cell freed, never forward.
    void seq_rm(int seq, int p0, int p1) {
        std::tie(p0, p1) = range(p0, p1);
        std::optional<int> first;
        for (int i = 0; i < size(); ++i) {
            Cell& c = cells_[std::size_t(i)];
            if (!in(c, p0, p1)) continue;
            if (seq >= 0 && !c.seqs.test(std::size_t(seq))) continue;
            if (seq >= 0) c.seqs.reset(std::size_t(seq));
            if (seq < 0 || c.seqs.none()) {
                free(i);
                if (!first) first = i;
            }
        }
        if (first && *first < head_) head_ = *first;
    }
    // seq_cp in one stream (470-510): dst joins src's cells; nothing moves.
    void seq_cp(int src, int dst, int p0, int p1) {
        if (src == dst) return;
        std::tie(p0, p1) = range(p0, p1);
        for (Cell& c : cells_)
            if (in(c, p0, p1) && c.seqs.test(std::size_t(src))) c.seqs.set(std::size_t(dst));
    }
    // seq_keep (555-586): the sequence's cells become its alone; every
    // other used cell is freed, and the head moves back to the first.
    void seq_keep(int seq) {
        std::optional<int> first;
        for (int i = 0; i < size(); ++i) {
            Cell& c = cells_[std::size_t(i)];
            if (c.seqs.test(std::size_t(seq))) {
                c.seqs.reset();
                c.seqs.set(std::size_t(seq));
            } else if (c.seqs.any()) {
                free(i);
                if (!first) first = i;
            }
        }
        if (first && *first < head_) head_ = *first;
    }
    // seq_add (588-636): the sequence's cells in [p0, p1) move by delta, with
    // every sequence sharing them; one moved below 0 is freed. The head goes
    // to the first cell freed, or else to 0.
    void seq_add(int seq, int p0, int p1, int delta) {
        if (delta == 0) return;
        std::tie(p0, p1) = range(p0, p1);
        if (p0 == p1) return;
        std::vector<int> moved;
        for (int i = 0; i < size(); ++i)
            if (in(cells_[std::size_t(i)], p0, p1) && cells_[std::size_t(i)].seqs.test(std::size_t(seq))) moved.push_back(i);
        if (unshares_ && !unshare(seq, moved)) return;
        std::optional<int> first;
        for (int i : moved) {
            Cell& c = cells_[std::size_t(i)];
            c.pos += delta;
            if (c.pos < 0) {
                free(i);
                if (!first || i < *first) first = i;
            }
        }
        head_ = first ? *first : 0;
    }
    // clear (387-398): every cell freed, the head at 0.
    void clear() {
        for (int i = 0; i < size(); ++i)
            if (cells_[std::size_t(i)].pos >= 0) free(i);
        head_ = 0;
    }
    // What a state save of the sequence lists: its cells' positions, in
    // cell order (state_write_meta).
    std::vector<int> positions(int seq) const {
        std::vector<int> out;
        for (const Cell& c : cells_)
            if (c.seqs.test(std::size_t(seq))) out.push_back(c.pos);
        return out;
    }
    // A state load of those positions (state_read_meta, 2350-2455): the
    // sequence emptied, then one ubatch of its cells placed as a decode
    // places one. A state of no cells changes nothing (state_read_sinfo
    // skips it, 2185-2191). False where no slot is found.
    bool load(int seq, std::span<const int> positions) {
        if (positions.empty()) return true;
        if (int(positions.size()) > size()) return false;
        KvCells trial = *this;
        trial.seq_rm(seq, -1, -1);
        std::vector<Token> ubatch;
        for (int p : positions) ubatch.push_back({seq, p});
        if (!trial.place(ubatch)) return false;
        *this = std::move(trial);
        return true;
    }
    // The highest position the sequence holds + 1 (llama_memory_seq_pos_max + 1).
    int length(int seq) const {
        int out = 0;
        for (const Cell& c : cells_)
            if (c.seqs.test(std::size_t(seq))) out = std::max(out, c.pos + 1);
        return out;
    }

private:
    struct Cell {
        int pos = -1;  // -1: empty
        std::bitset<kMaxSeq> seqs;
    };

    static std::pair<int, int> range(int p0, int p1) { return {std::max(p0, 0), p1 < 0 ? INT_MAX : p1}; }
    static bool in(const Cell& c, int p0, int p1) { return c.pos >= p0 && c.pos < p1; }
    void free(int i) {
        cells_[std::size_t(i)] = Cell{};
        used_.erase(i);
    }

    // find_slot for one stream, not contiguous: from the head (or from 0
    // when more than twice the ubatch's cells are unused below it), the
    // first empty cells, wrapping once round the cache. A cell of one
    // sequence is never taken: that is the sliding window's case alone.
    std::optional<std::vector<int>> find_slot(int n_tokens) const {
        int head = head_ > used() + 2 * n_tokens ? 0 : head_;
        if (n_tokens > size()) return std::nullopt;
        std::vector<int> idxs;
        int tested = 0;
        while (true) {
            if (head + 1 > size()) {
                tested += size() - head;
                head = 0;
                continue;
            }
            const int idx = head++;
            ++tested;
            if (cells_[std::size_t(idx)].pos < 0) idxs.push_back(idx);
            if (int(idxs.size()) == n_tokens) return idxs;
            if (tested >= size()) return std::nullopt;
        }
    }
    // apply_ubatch: each token's cell gets its position and sequence; the
    // head goes to just after the last cell placed.
    void apply(const std::vector<int>& idxs, std::span<const Token> u) {
        for (std::size_t k = 0; k < idxs.size(); ++k) {
            Cell& c = cells_[std::size_t(idxs[k])];
            c.pos = u[k].pos;
            c.seqs.set(std::size_t(u[k].seq));
            used_.insert(idxs[k]);
        }
        head_ = idxs.back() + 1;
    }
    // The fixed build's seq_add (shift-copies-shared-cells.patch): each
    // moved cell another sequence shares is copied into the highest empty
    // cell first, which the sequence then holds alone; with too few empty
    // cells nothing is shifted (false) and the head stays.
    bool unshare(int seq, std::vector<int>& moved) {
        std::vector<int> empty;
        for (int i = 0; i < size(); ++i)
            if (cells_[std::size_t(i)].pos < 0) empty.push_back(i);
        const auto shared = std::count_if(moved.begin(), moved.end(), [&](int i) { return cells_[std::size_t(i)].seqs.count() > 1; });
        if (shared > std::ptrdiff_t(empty.size())) return false;
        for (int& i : moved) {
            Cell& c = cells_[std::size_t(i)];
            if (c.seqs.count() <= 1) continue;
            const int j = empty.back();
            empty.pop_back();
            cells_[std::size_t(j)].pos = c.pos;
            cells_[std::size_t(j)].seqs.set(std::size_t(seq));
            used_.insert(j);
            c.seqs.reset(std::size_t(seq));
            i = j;
        }
        return true;
    }

    std::vector<Cell> cells_;
    std::set<int> used_;
    int head_ = 0;
    bool unshares_;
};

// One llama.h memory call of the plugin's table (llamacpp_memory_steps.hpp,
// the calls each engine op is made of), on the model.
inline void apply_step(KvCells& cells, const targets::llama_steps::Step& s) {
    switch (s.fn) {
        case targets::llama_steps::Fn::seq_rm: cells.seq_rm(s.seq, s.p0, s.p1); return;
        case targets::llama_steps::Fn::seq_cp: cells.seq_cp(s.seq, s.dst, s.p0, s.p1); return;
        case targets::llama_steps::Fn::seq_add: cells.seq_add(s.seq, s.p0, s.p1, s.delta); return;
        case targets::llama_steps::Fn::clear: cells.clear(); return;
        case targets::llama_steps::Fn::seq_keep: cells.seq_keep(s.seq); return;
    }
}

}  // namespace kvweld::llamacpp
