// llama-server's host-RAM prompt cache (--cache-ram, --cache-idle-slots),
// as each oracle models it over its own slot states: which prompts it
// keeps, when a slot's prompt goes in, and which one a slot takes back out.
// The rules are the server's (tools/server, b11434):
//
// - get_available_slot (server-context.cpp:1680-1795): a completion that
//   takes a slot by LRU, or a slot it shares less than half of, saves the
//   slot's prompt and loads the best cached one instead;
// - server_prompt_cache::alloc, load and update (server-task.cpp:1722-1905):
//   a prompt another entry already holds whole is not saved, one the new
//   entry holds whole is dropped; a load takes the entry that keeps more
//   of itself and covers more of the prompt than the slot does (at least a
//   quarter of the entry kept), and removes it; with --cache-ram -1 the
//   oldest entries go while they hold more tokens than the context;
// - launching a task (server-context.cpp:2641-2657), --cache-idle-slots
//   saves every idle slot and, with unified KV, clears it.
//
// The entries are the oracle's own slot states (its tokens, and whatever
// else it follows: the mirrored KV, the LoRA scales it was computed with),
// so a state moves between slots as the server moves it. The server keeps
// no LoRA scales with an entry; the oracles do.
#pragma once

#include "sim/server/server_exchange.hpp"
#include "util/error.hpp"

#include <list>
#include <optional>
#include <vector>

namespace kvweld::sim::server {

struct PromptCacheSettings {
    int ram_mib = 0;          // --cache-ram: 0 off, -1 no size limit (the context's tokens are), else MiB
    bool idle_slots = false;  // --cache-idle-slots
    bool unified = false;     // --kv-unified: an idle slot saved is cleared
    int n_ctx = 0;            // the server's whole context (llama_n_ctx, padded as the library pads it)
    bool on() const { return ram_mib != 0; }
};

// The context llama_n_ctx reports for -c `c` over `slots` sequences: the
// library pads it to 256 and, without unified KV, each slot's share too
// (llama-context.cpp:292-306).
int padded_n_ctx(int c, int slots, bool unified);

// The similarity get_available_slot computes: the longest common prefix
// over the prompt's length, in the server's float arithmetic.
int common_prefix(const std::vector<int>& a, const std::vector<int>& b);

// How get_available_slot takes a slot for `c`: by prompt similarity (the
// slot it names; -1 for LRU or a pinned slot), and whether it saves that
// slot's prompt and loads a cached one. `held`: each slot's tokens.
struct SlotChoice {
    int by_similarity = -1;
    bool update_cache = false;
};
SlotChoice choose_slot(const std::vector<const std::vector<int>*>& held, const Completion& c);

// One oracle's model of the cache. Entry: a slot state with `tokens`.
template <class Entry>
class PromptCacheModel {
public:
    PromptCacheModel() = default;
    explicit PromptCacheModel(const PromptCacheSettings& s) : settings_(s) {}
    const PromptCacheSettings& settings() const { return settings_; }

    // alloc: false where the cache keeps it already (or it is empty).
    bool save(const Entry& e) {
        if (e.tokens.empty()) return false;
        for (const Entry& x : states_)
            if (common_prefix(x.tokens, e.tokens) == int(e.tokens.size())) return false;
        states_.remove_if([&](const Entry& x) { return common_prefix(x.tokens, e.tokens) == int(x.tokens.size()); });
        states_.push_back(e);
        return true;
    }

    // load: the entry to put in a slot holding `base`, taken out; none where the slot's own is best.
    std::optional<Entry> load(const std::vector<int>& base, const std::vector<int>& prompt) {
        const int lcp = common_prefix(base, prompt);
        float keep_best = base.empty() ? -1.0f : float(lcp) / float(base.size());
        float sim_best = float(lcp) / float(prompt.size());
        auto best = states_.end();
        for (auto it = states_.begin(); it != states_.end(); ++it) {
            const int n = common_prefix(it->tokens, prompt);
            const float keep = float(n) / float(it->tokens.size()), sim = float(n) / float(prompt.size());
            if (keep < 0.25f) continue;  // "don't trash large prompts"
            if (keep_best < keep && sim_best < sim) keep_best = keep, sim_best = sim, best = it;
        }
        if (best == states_.end()) return std::nullopt;
        Entry out = std::move(*best);
        states_.erase(best);
        return out;
    }

    // update: with no size limit, the oldest entries go while the cache holds more tokens than the context.
    void update() {
        if (settings_.ram_mib >= 0) return;  // a MiB limit: this run's states are far smaller
        auto tokens = [&] {
            std::size_t n = 0;
            for (const Entry& x : states_) n += x.tokens.size();
            return n;
        };
        while (!states_.empty() && tokens() > std::size_t(settings_.n_ctx)) states_.pop_front();
    }

    // What the server does before `c` runs on `slots` (the answers name the
    // parent's slot and its copies'): get_available_slot's save and load,
    // then each idle slot saved and, unified, cleared. A request pinned to
    // an empty slot loads from the cache, as the server's comment says it
    // does; b11434 does not (finding pinned-empty-slot-skips-cache), and
    // from there its cache holds what the model moved. (Whether it loaded
    // cannot be told from its answer: a load that the request's LoRA
    // scales then clear reuses nothing either.)
    void before_launch(std::vector<Entry>& slots, const Completion& c, const std::vector<ServerAnswer>& answers) {
        if (!settings_.on()) return;
        std::vector<bool> busy(slots.size(), false);
        int parent = -1;
        for (const ServerAnswer& a : answers) {
            require(a.slot >= 0 && a.slot < int(slots.size()), "answer from slot ", a.slot, ": the server has ", slots.size());
            busy[std::size_t(a.slot)] = true;
            if (a.index == 0) parent = a.slot;
        }
        if (parent < 0) return;
        std::vector<const std::vector<int>*> held;
        for (const Entry& e : slots) held.push_back(&e.tokens);
        if (choose_slot(held, c).update_cache) {
            Entry& slot = slots[std::size_t(parent)];
            save(slot);
            if (std::optional<Entry> got = load(slot.tokens, c.prompt)) slot = std::move(*got);
            update();
        }
        if (!settings_.idle_slots) return;
        for (std::size_t k = 0; k < slots.size(); ++k) {
            if (busy[k]) continue;
            if (save(slots[k])) update();
            if (settings_.unified) slots[k].clear();
        }
    }

private:
    PromptCacheSettings settings_;
    std::list<Entry> states_;
};

}  // namespace kvweld::sim::server
