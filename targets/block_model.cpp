#include "targets/block_model.hpp"

#include "targets/kvweld/paged_params.hpp"
#include "util/cat.hpp"

namespace kvweld::targets {

std::uint64_t BlockModel::mint() {
    refs_[next_] = 1;
    return next_++;
}

void BlockModel::release(std::uint64_t b) {
    if (--refs_.at(b) == 0) refs_.erase(b);
}

bool BlockModel::append(int seq) {
    Seq& s = seqs_[seq];
    const bool full = s.length % block_size_ == 0;
    const bool shared = !full && refs_.at(s.blocks.back()) > 1;
    bool grew = false;
    if (full || shared) {
        if (in_use() == n_blocks_) {
            grow();
            grew = true;
        }
        if (shared) {
            release(s.blocks.back());
            s.blocks.back() = mint();
        } else {
            s.blocks.push_back(mint());
        }
    }
    ++s.length;
    return grew;
}

void BlockModel::truncate(int seq, int n) {
    Seq& s = seqs_[seq];
    const std::size_t keep = std::size_t((n + block_size_ - 1) / block_size_);
    while (s.blocks.size() > keep) {
        release(s.blocks.back());
        s.blocks.pop_back();
    }
    s.length = n;
}

void BlockModel::close(int seq) {
    truncate(seq, 0);
    seqs_.erase(seq);
}

void BlockModel::fork(int src, int dst) {
    truncate(dst, 0);
    const Seq copy = seqs_[src];
    for (std::uint64_t b : copy.blocks) ++refs_.at(b);
    seqs_[dst] = copy;
}

BlockModel BlockModel::for_kvweld_paged(const EngineSetup& setup) {
    const abi::PagedParams p = abi::paged_params(setup.params.c_str(), setup.seqs, setup.n_ctx);
    return BlockModel(p.block, p.blocks);
}

void BlockModel::clear_all() {
    for (auto& [seq, s] : seqs_) truncate(seq, 0);
}

void BlockModel::grow() {
    n_blocks_ = abi::grown_blocks(n_blocks_);
    ++grows_;
    ++replacements_;
}

void BlockModel::reset() {
    clear_all();
    ++replacements_;
}

int BlockModel::length(int seq) const {
    const auto it = seqs_.find(seq);
    return it == seqs_.end() ? 0 : it->second.length;
}

// Every open sequence's table has the length its positions need, and the
// engine's block numbers map one to one onto the model's abstract blocks.
std::optional<std::string> BlockModel::table_mismatch(const std::map<int, std::vector<int>>& tables,
                                                      std::map<int, std::uint64_t>& engine_to_model) const {
    std::map<std::uint64_t, int> model_to_engine;
    for (const auto& [seq, table] : tables) {
        const auto it = seqs_.find(seq);
        const std::vector<std::uint64_t> none;
        const std::vector<std::uint64_t>& want = it == seqs_.end() ? none : it->second.blocks;
        if (table.size() != want.size())
            return cat("sequence ", seq, "'s table holds ", table.size(), " blocks; its ", length(seq),
                       " positions need ", want.size());
        for (std::size_t i = 0; i < table.size(); ++i) {
            const auto [e, new_engine] = engine_to_model.emplace(table[i], want[i]);
            const auto [m, new_model] = model_to_engine.emplace(want[i], table[i]);
            if (e->second != want[i])
                return cat("sequence ", seq, " entry ", i, " is block ", table[i],
                           ", which another table holds for other positions (shared without a fork, or not copied "
                           "on write)");
            if (m->second != table[i])
                return cat("sequence ", seq, " entry ", i, " is block ", table[i], " but a fork sharing it holds block ",
                           m->second, " there");
        }
    }
    return std::nullopt;
}

}  // namespace kvweld::targets
