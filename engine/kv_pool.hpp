// KvPool: paged KV, the way serving engines keep it. One pool of fixed-size
// blocks (B token positions each, B a power of two) holds every layer's K
// and V; a sequence's KV is a block table plus a length (PagedSequence),
// per-token data rather than part of any plan. Blocks carry reference
// counts, so a forked sequence shares its prefix's blocks until it writes
// into one (copy on write).
//
// Identity: the pool's KvAllocId is minted when its storage is created or
// replaced (grow, reset) and kept across allocate, release, fork, truncate,
// writes and compaction, so a plan welded to the pool survives admit and
// retire: only replacing the pool's storage is AllocationChanged. The
// storage itself (PoolStorage) is shared: a plan pins the one it is welded
// to, so a plan that missed a grow reads the old storage, never freed memory.
//
// Exhaustion is a normal event: allocate() says so (nullopt) and nothing
// changes; every other misuse (a bad block, a released block, a length past
// the table) is an Error naming the value and the limit.
#pragma once

#include "engine/ids.hpp"
#include "engine/kv_cache.hpp"

#include <boost/container/small_vector.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvweld {

class PagedSequence;
class PoolStorage;

// A copy of one PoolStorage kept on a device by a backend (CUDA), made from
// the host content at the storage's first device bind; from then on the
// device copy is what plans read and write, so the pool's own data moves
// (copy on write, compaction) act on it too, and a grow reads it back first.
class PoolDeviceMirror {
public:
    virtual ~PoolDeviceMirror() = default;
    // Rows [0, rows) of block `from` to block `to`, every layer, K and V.
    virtual void copy_rows(int from, int to, int rows) = 0;
    // The whole device copy into the storage's host copy.
    virtual void download(PoolStorage& host) const = 0;
};

// Every layer's K and V for every block of one pool storage:
// [layer][block][offset][kv_dim], zeroed at birth, with a never-recycled
// serial (the weld oracle's handle).
class PoolStorage {
public:
    PoolStorage(int n_layers, int kv_dim, int block_size, int n_blocks);
    StorageSerial serial() const { return serial_; }
    int n_layers() const { return n_layers_; }
    int kv_dim() const { return kv_dim_; }
    int block_size() const { return block_size_; }
    int n_blocks() const { return n_blocks_; }
    std::size_t floats() const { return keys_.size(); }  // per K and per V
    // The first row of `block` in `layer`; nullptr when the block is not in
    // this storage (a plan welded to a smaller, replaced storage).
    float* key_block(int layer, int block) { return at(keys_, layer, block); }
    float* value_block(int layer, int block) { return at(values_, layer, block); }
    const float* key_block(int layer, int block) const { return const_cast<PoolStorage*>(this)->key_block(layer, block); }
    const float* value_block(int layer, int block) const {
        return const_cast<PoolStorage*>(this)->value_block(layer, block);
    }

    // The backend's device copy, if any (see PoolDeviceMirror).
    PoolDeviceMirror* device() const { return device_.get(); }
    void set_device(std::unique_ptr<PoolDeviceMirror> mirror) { device_ = std::move(mirror); }

private:
    float* at(std::vector<float>& v, int layer, int block);
    int n_layers_, kv_dim_, block_size_, n_blocks_;
    StorageSerial serial_ = StorageSerial::mint();
    std::vector<float> keys_, values_;
    std::unique_ptr<PoolDeviceMirror> device_;
};

class KvPool {
public:
    // n_layers, kv_dim from `geometry` (its max_seq_len is not used);
    // block_size a power of two in 1..1024; n_blocks >= 1; the whole pool
    // at most kMaxCacheBytes. Otherwise an Error naming the value.
    KvPool(const KvGeometry& geometry, int block_size, int n_blocks);

    int block_size() const { return block_size_; }
    int n_blocks() const { return static_cast<int>(refs_.size()); }
    int free_blocks() const { return static_cast<int>(free_.size()); }
    int n_layers() const { return n_layers_; }
    int kv_dim() const { return kv_dim_; }
    KvAllocId alloc_id() const { return alloc_id_; }

    // A free block with one reference, or nullopt when every block is in use.
    std::optional<int> allocate();
    void retain(int block);   // one more reference (a fork shares the block)
    void release(int block);  // one fewer; at zero the block is free again
    int refcount(int block) const;

    // Row `offset` (0..block_size-1) of `block` in `layer`.
    float* key(int layer, int block, int offset);
    float* value(int layer, int block, int offset);
    const float* key(int layer, int block, int offset) const;
    const float* value(int layer, int block, int offset) const;

    // The storage a plan welds to (replaced by grow and reset).
    const std::shared_ptr<PoolStorage>& storage() const { return storage_; }
    // Brings the host copy up to date with a device copy (a CUDA plan
    // writes there), before the host reads K/V rows; nothing without one.
    void download() const;

    // Replaces the storage with a larger one (n_blocks > the current count),
    // content and references kept, block numbers unchanged: new id.
    void grow(int n_blocks);
    // Moves the highest blocks in use into the lowest free ones, in place,
    // and re-points every table in `seqs` (which must be every live
    // sequence of the pool): the id stays. Returns the blocks moved.
    int compact(std::span<PagedSequence* const> seqs);
    // Every block free, storage replaced: new id. Sequences must be dropped.
    void reset();

private:
    std::size_t row(int layer, int block, int offset) const;
    void require_block(int block, const char* what) const;

    void move_block(int from, int to);

    int n_layers_, kv_dim_, block_size_;
    std::shared_ptr<PoolStorage> storage_;
    std::vector<int> refs_;             // per block; 0 = free
    std::vector<int> free_;             // free blocks, lowest last (allocate takes the lowest)
    KvAllocId alloc_id_;
};

// A sequence's KV in a pool: the blocks of positions 0..length-1, in order.
// It holds one reference on each block in its table.
class PagedSequence {
public:
    using Table = boost::container::small_vector<int, 16>;

    int length() const { return length_; }
    const Table& table() const { return table_; }
    // Where position `pos` (< length) lives: (block, offset).
    std::pair<int, int> locate(const KvPool& pool, int pos) const;

    // Makes room for position length() and returns where to write it: a
    // new block when the last is full, or a private copy of the last block
    // when it is shared (copy on write). nullopt when the pool is exhausted;
    // then nothing changed.
    std::optional<std::pair<int, int>> append(KvPool& pool);
    // Keeps positions 0..n-1 (n <= length, else Error) and releases the
    // blocks past them.
    void truncate_to(KvPool& pool, int n);
    // A sequence sharing every block of this one.
    PagedSequence fork(KvPool& pool) const;
    // Releases every block (retire, preempt).
    void release_all(KvPool& pool);

private:
    friend class KvPool;  // compaction re-points tables
    Table table_;
    int length_ = 0;
};

// The block ledger: with `tables` every live sequence of the pool, each
// block's reference count must equal the number of tables holding it (a
// block in two tables is shared through fork, with its count), and a free
// block must be in no table. Returns the first violation, naming the block.
std::optional<std::string> block_ledger_violation(const KvPool& pool, std::span<const PagedSequence* const> tables);

}  // namespace kvweld
