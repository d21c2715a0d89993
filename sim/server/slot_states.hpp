// The server's slots as kvweld models them, in one place: each slot's
// state, the slot files, the host-RAM prompt cache (prompt_cache.hpp), the
// server's own LoRA scales and each slot's adapters. Every oracle, the
// known findings' walk and the draw follow the server through one
// SlotStates over a state of their own (a mirrored KV, a count, a
// conversation), so a rule of the server's (a copy's slot is released
// empty, a restore moves a file's state whole, a request that names no
// adapters runs with the server's) is written once.
//
// What a state must have: `tokens` (what the RAM cache compares) and
// `clear()`; it may have `as_saved()`, what a slot file keeps of it (all
// of it otherwise). What happens to it when a request runs is the owner's: it gets
// the slot's state as it was before the prompt and makes it what it is after.
#pragma once

#include "sim/server/prompt_cache.hpp"
#include "sim/server/server_exchange.hpp"
#include "sim/server/server_settings.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvweld::sim::server {

// What a slot reuses of its tokens for a new prompt, as the server plans
// it: the longest common prefix, then (cache_reuse > 0) each later run of
// at least cache_reuse tokens it holds, shifted into place (tools/server
// server-context.cpp, "reuse chunks from the cached prompt"); n_past is at
// most the prompt's length minus one (the last token is evaluated again).
struct ReusePlan {
    struct Chunk {
        int from, to, n;  // held[from, from + n) moves to positions [to, to + n)
    };
    int n_past = 0;
    std::vector<Chunk> chunks;
};
ReusePlan plan_reuse(const std::vector<int>& held, const std::vector<int>& prompt, int cache_reuse);

// The LoRA scales a request runs with: its own, or the server's where it names none.
const std::vector<float>& scales_of(const Completion& c, const std::vector<float>& server_scales);

// The answers of a completion in the order the server made them: the one
// that computed the prompt first (index 0), then the copies (n_cmpl).
std::vector<const ServerAnswer*> parent_first(const std::vector<ServerAnswer>& answers);

// The first complaint of a completion's answers (n_cmpl: named by its index) kept in `wrong`.
void keep_first(std::string& wrong, const std::string& why, std::size_t answers, const ServerAnswer& a);

template <class State>
class SlotStates {
public:
    // `empty`: a slot's state before anything ran (a file never saved restores it too).
    SlotStates(const ServerSettings& s, int model_ctx, State empty)
        : empty_(std::move(empty)), slots_(std::size_t(s.slots), empty_), ram_(s.prompt_cache(model_ctx)),
          server_(std::size_t(s.loras), kServerLoraScale), adapters_(std::size_t(s.slots), server_) {}

    State& slot(int k) {
        require(k >= 0 && k < int(slots_.size()), "slot ", k, ": the server has ", slots_.size());
        return slots_[std::size_t(k)];
    }
    const State& slot(int k) const { return const_cast<SlotStates*>(this)->slot(k); }
    const std::vector<State>& slots() const { return slots_; }
    // A slot file's state; nullptr where none was saved.
    const State* file(int k) const {
        return k >= 0 && std::size_t(k) < files_.size() && files_[std::size_t(k)] ? &*files_[std::size_t(k)] : nullptr;
    }
    const PromptCacheModel<State>& ram() const { return ram_; }

    // The server's own scales (POST /lora-adapters), for requests that name none.
    const std::vector<float>& server_scales() const { return server_; }
    const std::vector<float>& scales(const Completion& c) const { return scales_of(c, server_); }
    // A slot's adapters as the server keeps them (slot.lora): its last request's scales.
    const std::vector<float>& adapters(int k) const { return adapters_.at(std::size_t(k)); }

    void lora(const Lora& op) { server_ = op.scales; }

    // A slot action: a file takes the slot's state, the slot a file's, or the slot is emptied.
    void act(const Slot& op) {
        State& s = slot(op.slot);
        require(op.file >= 0, "slot action on file ", op.file);
        if (files_.size() <= std::size_t(op.file)) files_.resize(std::size_t(op.file) + 1);
        std::optional<State>& f = files_[std::size_t(op.file)];
        switch (op.action) {
            case SlotAction::save: f = saved(s); break;
            case SlotAction::restore: s = f ? *f : empty_; break;
            case SlotAction::erase: s.clear(); break;
        }
    }

    // A completion the server answered: the RAM cache's part first (the
    // slot the parent took may save its prompt and load a cached one), then
    // each answer, parent first, gets `serve(state, before, answer)` on its
    // slot: `state` starts as the parent's slot before the prompt (a copy
    // starts from the parent's cells) and `serve` leaves it as the answer
    // did, returning its complaint or "". A copy's slot is released empty
    // ("do not keep context of the child slots - the parent's context is
    // enough", server-context.cpp). The first complaint is returned.
    template <class Serve>
    std::string complete(const Completion& c, const std::vector<ServerAnswer>& answers, Serve&& serve) {
        for (const ServerAnswer& a : answers) slot(a.slot);  // every answer names a slot the server has
        ram_.before_launch(slots_, c, answers);
        std::string wrong;
        std::optional<State> before;
        for (const ServerAnswer* a : parent_first(answers)) {
            State& s = slot(a->slot);
            if (!before) before = s;
            else s = *before;
            keep_first(wrong, serve(s, std::as_const(*before), *a), answers.size(), *a);
            adapters_[std::size_t(a->slot)] = scales(c);
            if (a->index > 0) s.clear();
        }
        return wrong;
    }

private:
    // What a slot file keeps of a state: all of it, unless the state says (as_saved).
    static State saved(const State& s) {
        if constexpr (requires { s.as_saved(); }) return s.as_saved();
        else return s;
    }
    State empty_;
    std::vector<State> slots_;
    std::vector<std::optional<State>> files_;
    PromptCacheModel<State> ram_;
    std::vector<float> server_;
    std::vector<std::vector<float>> adapters_;
};

}  // namespace kvweld::sim::server
