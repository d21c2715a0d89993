// llama-server's host-RAM prompt cache as the oracles model it
// (sim/server/prompt_cache.hpp): the slot choice and the context size.
#include "sim/server/prompt_cache.hpp"

namespace kvweld::sim::server {

namespace {

constexpr float kSlotPromptSimilarity = 0.1f;  // --slot-prompt-similarity's default

int pad256(int n) { return (n + 255) / 256 * 256; }

}  // namespace

int padded_n_ctx(int c, int slots, bool unified) {
    const int n = pad256(c);
    return unified ? n : pad256(n / slots) * slots;
}

int common_prefix(const std::vector<int>& a, const std::vector<int>& b) {
    std::size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return int(n);
}

// The server's arithmetic, float for float: f_sim = lcp / prompt length;
// f_keep = f_sim * prompt length / the slot's length. A request pinned to
// an empty slot "still goes through cache update logic" (the server's
// comment, server-context.cpp:1685): the model saves and loads there. The
// server does not: its f_keep is 0/0, NaN, never below one half
// (finding pinned-empty-slot-skips-cache).
SlotChoice choose_slot(const std::vector<const std::vector<int>*>& held, const Completion& c) {
    const float n = float(c.prompt.size());
    float sim_best = 0;
    int best = -1;
    for (std::size_t k = 0; k < held.size(); ++k) {
        if (c.slot >= 0 && int(k) != c.slot) continue;
        if (held[k]->empty()) continue;
        const float sim = float(common_prefix(*held[k], c.prompt)) / n;
        if (sim > sim_best && sim > kSlotPromptSimilarity) sim_best = sim, best = int(k);
    }
    const int chosen = c.slot >= 0 ? c.slot : best;
    if (chosen < 0) return {-1, true};  // least recently used: its prompt is saved
    if (held[std::size_t(chosen)]->empty()) return {-1, true};  // pinned to an empty slot
    const float keep = (sim_best * n) / float(held[std::size_t(chosen)]->size());
    return {c.slot >= 0 ? -1 : best, keep < 0.5f};
}

}  // namespace kvweld::sim::server
