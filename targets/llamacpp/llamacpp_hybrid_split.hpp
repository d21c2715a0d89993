// How a hybrid memory splits a call (llama_memory_hybrid[_iswa]::init_batch,
// src/llama-memory-hybrid-iswa.cpp:76-88 in b11434): split_equal
// (llama-batch.cpp:603-771), non-sequential in a unified cache, keeping
// each sequence's last n_rs_seq + 1 tokens in one ubatch where rollback
// snapshots are on; by sequence (split_seq) with embeddings on. Each ubatch
// is its tokens' sequences, in the ubatch's order.
#pragma once

#include <algorithm>
#include <map>
#include <span>
#include <vector>

namespace kvweld::targets {

inline std::vector<std::vector<int>> hybrid_split(std::span<const int> seqs, int n_ubatch, bool sequential, int keep_tail) {
    std::vector<std::vector<int>> out;
    std::vector<bool> used(seqs.size(), false);
    std::map<int, std::vector<std::size_t>> of;  // each sequence's tokens, in order
    for (std::size_t i = 0; i < seqs.size(); ++i) of[seqs[i]].push_back(i);
    while (std::count(used.begin(), used.end(), true) < std::ptrdiff_t(seqs.size())) {
        std::vector<int> set;  // the sequences taking part, in the order of their first unused token
        for (std::size_t i = 0; i < seqs.size() && int(set.size()) <= n_ubatch; ++i) {
            if (used[i] || std::find(set.begin(), set.end(), seqs[i]) != set.end()) continue;
            if (!sequential || set.empty() || seqs[i] == set.back() + 1) set.push_back(seqs[i]);
        }
        std::vector<std::size_t> cur(set.size(), 0);  // each one's next unused token
        const auto remaining = [&](std::size_t k) {
            while (cur[k] < of[set[k]].size() && used[of[set[k]][cur[k]]]) ++cur[k];
            std::size_t n = 0;
            for (std::size_t j = cur[k]; j < of[set[k]].size(); ++j) n += !used[of[set[k]][j]];
            return n;
        };
        std::vector<std::vector<std::size_t>> taken(set.size());
        for (bool more = true; more;) {
            for (std::size_t k = 0; k < set.size(); ++k) more = more && remaining(k) > 0;
            if (!more) break;
            for (std::size_t k = 0; k < set.size(); ++k) {
                const std::size_t i = of[set[k]][cur[k]];
                used[i] = true;
                taken[k].push_back(i);
            }
            more = (taken[0].size() + 1) * set.size() <= std::size_t(n_ubatch);
        }
        std::size_t keep = set.size();
        if (keep_tail > 0) {  // the longest prefix of sequences that finish here or keep keep_tail for later
            keep = 0;
            while (keep < set.size() && !(remaining(keep) != 0 && remaining(keep) < std::size_t(keep_tail))) ++keep;
            if (keep == 0) {  // the first alone: to its end where it fits, else leaving keep_tail
                if (taken[0].size() + remaining(0) <= std::size_t(n_ubatch)) {
                    while (remaining(0) > 0) {
                        used[of[set[0]][cur[0]]] = true;
                        taken[0].push_back(of[set[0]][cur[0]]);
                    }
                } else {
                    while (remaining(0) < std::size_t(keep_tail)) {
                        used[taken[0].back()] = false;
                        taken[0].pop_back();
                        cur[0] = 0;
                    }
                }
                keep = 1;
            }
            for (std::size_t k = keep; k < set.size(); ++k)
                for (std::size_t i : taken[k]) used[i] = false;
        }
        std::vector<int> ubatch;
        for (std::size_t k = 0; k < keep; ++k) ubatch.insert(ubatch.end(), taken[k].size(), set[k]);
        out.push_back(std::move(ubatch));
    }
    return out;
}

}  // namespace kvweld::targets
