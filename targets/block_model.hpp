// The simulator's own model of a paged engine's block ownership,
// built from its op log alone: which abstract blocks each sequence's
// positions are in, how many sequences share each, and how many blocks the
// pool must have. It never asks the engine; the block ledger oracle then
// holds the engine's tables and counts against it, and the paged reuse rule
// uses it to know when the pool must grow.
//
// Abstract blocks are numbers the model mints; the oracle checks that the
// engine's block numbers correspond to them one to one (two sequences share
// an engine block exactly when they share an abstract one), that each
// engine block's reference count is the number of tables holding it, and
// that the rest of the pool is free.
#pragma once

#include "targets/engine.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvweld::targets {

class BlockModel {
public:
    BlockModel(int block_size, int n_blocks) : block_size_(block_size), n_blocks_(n_blocks) {}
    // The pool kvweld's paged engine starts with under `config`'s settings.
    static BlockModel for_kvweld_paged(const EngineSetup& setup);

    int block_size() const { return block_size_; }
    int n_blocks() const { return n_blocks_; }
    int in_use() const { return int(refs_.size()); }
    int grows() const { return grows_; }
    int replacements() const { return replacements_; }  // the pool's storage replaced: grows and resets

    // A decode appends one position to `seq`: a new block when its last is
    // full or shared (copy on write). Returns true when the pool had to
    // grow for it (no block free: the engine doubles the pool first).
    bool append(int seq);
    void truncate(int seq, int n);
    void clear(int seq) { truncate(seq, 0); }
    void close(int seq);
    void clear_all();
    void fork(int src, int dst);  // dst's own blocks go first
    void grow();                  // an explicit grow: twice the blocks
    void reset();                 // every sequence emptied, the storage replaced, the same blocks

    int length(int seq) const;
    // The first difference between this model and what the engine reports:
    // `tables` each open sequence's block table, `refcount(b)` the engine's
    // count for block b, `n_blocks`/`free_blocks` the engine's pool.
    template <class Refcount>
    std::optional<std::string> mismatch(const std::map<int, std::vector<int>>& tables, Refcount&& refcount,
                                        int n_blocks, int free_blocks) const;

private:
    struct Seq {
        std::vector<std::uint64_t> blocks;
        int length = 0;
    };
    std::uint64_t mint();
    void release(std::uint64_t b);
    std::optional<std::string> table_mismatch(const std::map<int, std::vector<int>>& tables,
                                              std::map<int, std::uint64_t>& engine_to_model) const;

    int block_size_, n_blocks_;
    int grows_ = 0;
    int replacements_ = 0;
    std::uint64_t next_ = 1;
    std::map<int, Seq> seqs_;
    std::map<std::uint64_t, int> refs_;  // abstract block -> tables holding it
};

template <class Refcount>
std::optional<std::string> BlockModel::mismatch(const std::map<int, std::vector<int>>& tables, Refcount&& refcount,
                                                int n_blocks, int free_blocks) const {
    if (n_blocks != n_blocks_)
        return "the pool has " + std::to_string(n_blocks) + " blocks; the simulator's log says " +
               std::to_string(n_blocks_);
    std::map<int, std::uint64_t> engine_to_model;
    if (auto problem = table_mismatch(tables, engine_to_model)) return problem;
    for (const auto& [block, abstract] : engine_to_model) {
        const int got = refcount(block), want = refs_.at(abstract);
        if (got != want)
            return "block " + std::to_string(block) + " has " + std::to_string(got) + " references; " +
                   std::to_string(want) + " table(s) hold it" + (got == 0 ? ": a freed block is still in a table" : "");
    }
    if (free_blocks != n_blocks_ - in_use())
        return std::to_string(free_blocks) + " blocks are free; with " + std::to_string(in_use()) + " of " +
               std::to_string(n_blocks_) + " in use there should be " + std::to_string(n_blocks_ - in_use());
    return std::nullopt;
}

}  // namespace kvweld::targets
