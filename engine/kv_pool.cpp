#include "engine/kv_pool.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"

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

KvPool::KvPool(const KvGeometry& g, int block_size, int n_blocks)
    : n_layers_(g.n_layers), kv_dim_(g.kv_dim()), block_size_(block_size), alloc_id_(KvAllocId::mint()) {
    require(n_layers_ >= 1 && kv_dim_ >= 1, "KV pool geometry: ", n_layers_, " layers, kv_dim ", kv_dim_,
            ": both must be >= 1");
    require(block_size >= 1 && block_size <= 1024 && (block_size & (block_size - 1)) == 0, "KV pool block size ",
            block_size, ": must be a power of two in 1..1024");
    require_pool_size(n_layers_, kv_dim_, block_size, n_blocks);
    keys_.assign(pool_floats(n_layers_, kv_dim_, block_size, n_blocks), 0.0f);
    values_.assign(keys_.size(), 0.0f);
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
    return ((std::size_t(layer) * std::size_t(n_blocks()) + std::size_t(block)) * std::size_t(block_size_) +
            std::size_t(offset)) *
           std::size_t(kv_dim_);
}

float* KvPool::key(int layer, int block, int offset) { return keys_.data() + row(layer, block, offset); }
float* KvPool::value(int layer, int block, int offset) { return values_.data() + row(layer, block, offset); }
const float* KvPool::key(int layer, int block, int offset) const { return keys_.data() + row(layer, block, offset); }
const float* KvPool::value(int layer, int block, int offset) const {
    return values_.data() + row(layer, block, offset);
}

void KvPool::grow(int n_blocks) {
    require(n_blocks > this->n_blocks(), "KV pool grow to ", n_blocks, " blocks: must be more than the ",
            this->n_blocks(), " it has");
    require_pool_size(n_layers_, kv_dim_, block_size_, n_blocks);
    std::vector<float> keys(pool_floats(n_layers_, kv_dim_, block_size_, n_blocks), 0.0f), values(keys.size(), 0.0f);
    const std::size_t per_layer_old = std::size_t(this->n_blocks()) * std::size_t(block_size_) * std::size_t(kv_dim_);
    const std::size_t per_layer_new = std::size_t(n_blocks) * std::size_t(block_size_) * std::size_t(kv_dim_);
    for (int l = 0; l < n_layers_; ++l) {
        std::copy_n(keys_.begin() + long(std::size_t(l) * per_layer_old), per_layer_old,
                    keys.begin() + long(std::size_t(l) * per_layer_new));
        std::copy_n(values_.begin() + long(std::size_t(l) * per_layer_old), per_layer_old,
                    values.begin() + long(std::size_t(l) * per_layer_new));
    }
    const int old = this->n_blocks();
    keys_ = std::move(keys);
    values_ = std::move(values);
    refs_.resize(std::size_t(n_blocks), 0);
    for (int b = old; b < n_blocks; ++b) free_.insert(free_.begin(), b);  // kept highest first
    alloc_id_ = KvAllocId::mint();
}

void KvPool::reset() {
    std::fill(keys_.begin(), keys_.end(), 0.0f);
    std::fill(values_.begin(), values_.end(), 0.0f);
    std::fill(refs_.begin(), refs_.end(), 0);
    free_.clear();
    for (int b = n_blocks() - 1; b >= 0; --b) free_.push_back(b);
    alloc_id_ = KvAllocId::mint();
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
    } else if (pool.refcount(table_.back()) > 1) {  // shared with a fork: copy on write
        const std::optional<int> b = pool.allocate();
        if (!b) return std::nullopt;
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
    while (table_.size() > keep) {
        pool.release(table_.back());
        table_.pop_back();
    }
    length_ = n;
}

PagedSequence PagedSequence::fork(KvPool& pool) const {
    for (int b : table_) pool.retain(b);
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
