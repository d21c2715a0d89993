#include "engine/kv_pool.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"

#include <algorithm>
#include <map>

namespace kvweld {

namespace {

std::size_t pool_floats(int n_layers, int kv_dim, int block_size, int n_blocks) {
    return std::size_t(n_layers) * std::size_t(n_blocks) * std::size_t(block_size) * std::size_t(kv_dim);
}

void require_pool_size(int n_layers, int kv_dim, int block_size, int n_blocks) {
    require(n_blocks >= 1, "KV pool of ", n_blocks, " blocks: must be >= 1");
    const long double bytes = 2.0L * 4.0L * n_layers * kv_dim * static_cast<long double>(block_size) * n_blocks;
    require(bytes <= static_cast<long double>(kMaxCacheBytes), "KV pool of ", n_blocks, " blocks of ", block_size,
            " positions (", n_layers, " layers, kv_dim ", kv_dim, ") needs ", static_cast<double>(bytes),
            " bytes: more than the limit of ", kMaxCacheBytes);
}

}  // namespace

PoolStorage::PoolStorage(int n_layers, int kv_dim, int block_size, int n_blocks)
    : n_layers_(n_layers), kv_dim_(kv_dim), block_size_(block_size), n_blocks_(n_blocks),
      keys_(pool_floats(n_layers, kv_dim, block_size, n_blocks), 0.0f), values_(keys_.size(), 0.0f) {}

float* PoolStorage::at(std::vector<float>& v, int layer, int block) {
    if (layer < 0 || layer >= n_layers_ || block < 0 || block >= n_blocks_) return nullptr;
    return v.data() + (std::size_t(layer) * std::size_t(n_blocks_) + std::size_t(block)) * std::size_t(block_size_) *
                          std::size_t(kv_dim_);
}

KvPool::KvPool(const KvGeometry& g, int block_size, int n_blocks)
    : n_layers_(g.n_layers), kv_dim_(g.kv_dim()), block_size_(block_size), alloc_id_(KvAllocId::mint()) {
    require(n_layers_ >= 1 && kv_dim_ >= 1, "KV pool geometry: ", n_layers_, " layers, kv_dim ", kv_dim_,
            ": both must be >= 1");
    require(block_size >= 1 && block_size <= 1024 && (block_size & (block_size - 1)) == 0, "KV pool block size ",
            block_size, ": must be a power of two in 1..1024");
    require_pool_size(n_layers_, kv_dim_, block_size, n_blocks);
    storage_ = std::make_shared<PoolStorage>(n_layers_, kv_dim_, block_size, n_blocks);
    refs_.assign(std::size_t(n_blocks), 0);
    for (int b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int> KvPool::allocate() {
    if (free_.empty()) return std::nullopt;
    const int b = free_.back();
    free_.pop_back();
    refs_[std::size_t(b)] = 1;
    return b;
}

void KvPool::require_block(int block, const char* what) const {
    require(block >= 0 && block < n_blocks(), what, ": block ", block, " out of range 0..", n_blocks() - 1);
    require(refs_[std::size_t(block)] > 0, what, ": block ", block, " is free");
}

void KvPool::retain(int block) {
    require_block(block, "retain");
    ++refs_[std::size_t(block)];
}

void KvPool::release(int block) {
    require_block(block, "release");
    if (--refs_[std::size_t(block)] > 0) return;
    // Kept sorted, highest first, so allocate() always takes the lowest free block.
    free_.insert(std::upper_bound(free_.begin(), free_.end(), block, std::greater<>()), block);
}

int KvPool::refcount(int block) const {
    require(block >= 0 && block < n_blocks(), "refcount: block ", block, " out of range 0..", n_blocks() - 1);
    return refs_[std::size_t(block)];
}

std::size_t KvPool::row(int layer, int block, int offset) const {
    require(layer >= 0 && layer < n_layers_, "KV pool: layer ", layer, " out of range 0..", n_layers_ - 1);
    require(block >= 0 && block < n_blocks(), "KV pool: block ", block, " out of range 0..", n_blocks() - 1);
    require(offset >= 0 && offset < block_size_, "KV pool: offset ", offset, " out of range 0..", block_size_ - 1);
    return std::size_t(offset) * std::size_t(kv_dim_);
}

float* KvPool::key(int layer, int block, int offset) {
    const std::size_t r = row(layer, block, offset);
    return storage_->key_block(layer, block) + r;
}
float* KvPool::value(int layer, int block, int offset) {
    const std::size_t r = row(layer, block, offset);
    return storage_->value_block(layer, block) + r;
}
const float* KvPool::key(int layer, int block, int offset) const { return const_cast<KvPool*>(this)->key(layer, block, offset); }
const float* KvPool::value(int layer, int block, int offset) const {
    return const_cast<KvPool*>(this)->value(layer, block, offset);
}

void KvPool::download() const {
    if (const PoolDeviceMirror* mirror = storage_->device()) mirror->download(*storage_);
}

void KvPool::grow(int n_blocks) {
    require(n_blocks > this->n_blocks(), "KV pool grow to ", n_blocks, " blocks: must be more than the ",
            this->n_blocks(), " it has");
    require_pool_size(n_layers_, kv_dim_, block_size_, n_blocks);
    auto grown = std::make_shared<PoolStorage>(n_layers_, kv_dim_, block_size_, n_blocks);
    download();  // a device copy is the current one; the new storage starts from the host's
    const std::size_t block_floats = std::size_t(block_size_) * std::size_t(kv_dim_);
    for (int l = 0; l < n_layers_; ++l)
        for (int b = 0; b < this->n_blocks(); ++b) {
            std::copy_n(storage_->key_block(l, b), block_floats, grown->key_block(l, b));
            std::copy_n(storage_->value_block(l, b), block_floats, grown->value_block(l, b));
        }
    const int old = this->n_blocks();
    storage_ = std::move(grown);
    refs_.resize(std::size_t(n_blocks), 0);
    for (int b = old; b < n_blocks; ++b) free_.insert(free_.begin(), b);  // kept highest first
    // The fault: plans welded to the old storage look valid and keep it.
    if (!fault_on(Fault::grow_keeps_id)) alloc_id_ = KvAllocId::mint();
}

void KvPool::move_block(int from, int to) {
    if (PoolDeviceMirror* mirror = storage_->device()) mirror->copy_rows(from, to, block_size_);
    const std::size_t block_floats = std::size_t(block_size_) * std::size_t(kv_dim_);
    for (int l = 0; l < n_layers_; ++l) {
        std::copy_n(storage_->key_block(l, from), block_floats, storage_->key_block(l, to));
        std::copy_n(storage_->value_block(l, from), block_floats, storage_->value_block(l, to));
    }
    refs_[std::size_t(to)] = refs_[std::size_t(from)];
    refs_[std::size_t(from)] = 0;
    free_.pop_back();  // `to` was the lowest free block
    free_.insert(std::upper_bound(free_.begin(), free_.end(), from, std::greater<>()), from);
}

int KvPool::compact(std::span<PagedSequence* const> seqs) {
    int moved = 0;
    for (;;) {
        int highest = n_blocks() - 1;
        while (highest >= 0 && refs_[std::size_t(highest)] == 0) --highest;
        if (free_.empty() || free_.back() > highest) return moved;
        const int to = free_.back();
        move_block(highest, to);
        bool skipped = false;  // the fault leaves the first table holding it pointing at the old block
        for (PagedSequence* s : seqs)
            for (int& b : s->table_)
                if (b == highest) {
                    if (fault_on(Fault::compact_skips_table) && !skipped) {
                        skipped = true;
                        break;
                    }
                    b = to;
                }
        ++moved;
    }
}

void KvPool::reset() {
    storage_ = std::make_shared<PoolStorage>(n_layers_, kv_dim_, block_size_, n_blocks());
    std::fill(refs_.begin(), refs_.end(), 0);
    free_.clear();
    for (int b = n_blocks() - 1; b >= 0; --b) free_.push_back(b);
    if (!fault_on(Fault::grow_keeps_id)) alloc_id_ = KvAllocId::mint();
}

std::pair<int, int> PagedSequence::locate(const KvPool& pool, int pos) const {
    require(pos >= 0 && pos < length_, "paged sequence: position ", pos, " out of range 0..", length_ - 1);
    return {table_[std::size_t(pos / pool.block_size())], pos % pool.block_size()};
}

std::optional<std::pair<int, int>> PagedSequence::append(KvPool& pool) {
    const int offset = length_ % pool.block_size();
    if (offset == 0) {  // the last block is full (or there is none): a new one
        const std::optional<int> b = pool.allocate();
        if (!b) return std::nullopt;
        table_.push_back(*b);
    } else if (pool.refcount(table_.back()) > 1 && !fault_on(Fault::cow_skipped)) {  // shared: copy on write
        const std::optional<int> b = pool.allocate();
        if (!b) return std::nullopt;
        if (PoolDeviceMirror* mirror = pool.storage()->device()) mirror->copy_rows(table_.back(), *b, offset);
        for (int l = 0; l < pool.n_layers(); ++l)
            for (int o = 0; o < offset; ++o) {
                std::copy_n(pool.key(l, table_.back(), o), pool.kv_dim(), pool.key(l, *b, o));
                std::copy_n(pool.value(l, table_.back(), o), pool.kv_dim(), pool.value(l, *b, o));
            }
        pool.release(table_.back());
        table_.back() = *b;
    }
    ++length_;
    return std::pair{table_.back(), offset};
}

void PagedSequence::truncate_to(KvPool& pool, int n) {
    require(n >= 0 && n <= length_, "paged sequence truncate_to(", n, "): must be in 0..", length_);
    const std::size_t keep = std::size_t((n + pool.block_size() - 1) / pool.block_size());
    // The fault releases the blocks past n but leaves them in the table (and
    // releases a left one again only while something holds it).
    const bool leave = fault_on(Fault::freed_block_in_table);
    for (std::size_t i = table_.size(); i > keep; --i)
        if (!leave || pool.refcount(table_[i - 1]) > 0) pool.release(table_[i - 1]);
    if (!leave) table_.resize(keep);
    length_ = n;
}

PagedSequence PagedSequence::fork(KvPool& pool) const {
    // The fault takes no reference on the last block.
    const std::size_t n = fault_on(Fault::refcount_off_by_one) && !table_.empty() ? table_.size() - 1 : table_.size();
    for (std::size_t i = 0; i < n; ++i) pool.retain(table_[i]);
    return *this;
}

void PagedSequence::release_all(KvPool& pool) { truncate_to(pool, 0); }

std::optional<std::string> block_ledger_violation(const KvPool& pool, std::span<const PagedSequence* const> tables) {
    std::map<int, int> held;
    for (const PagedSequence* s : tables)
        for (int b : s->table()) {
            if (b < 0 || b >= pool.n_blocks()) return cat("a table holds block ", b, ", outside 0..", pool.n_blocks() - 1);
            ++held[b];
        }
    int free = 0;
    for (int b = 0; b < pool.n_blocks(); ++b) {
        const int want = held.count(b) ? held[b] : 0, got = pool.refcount(b);
        if (got != want)
            return cat("block ", b, " has ", got, " references but ", want, " table(s) hold it",
                       got == 0 ? ": a freed block is still reachable" : "");
        free += got == 0;
    }
    if (free != pool.free_blocks())
        return cat(pool.free_blocks(), " blocks on the free list but ", free, " have no reference");
    return std::nullopt;
}

}  // namespace kvweld
