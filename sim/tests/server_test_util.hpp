// What the server simulator's oracle tests build their exchanges from: a
// request, and an answer as the server would give it.
#pragma once

#include "sim/server/server_exchange.hpp"
#include "sim/server/server_settings.hpp"

#include <utility>
#include <vector>

namespace kvweld::sim::server::test {

// Settings for an oracle under test: `slots` slots, one stream each, F32
// KV, nothing else on; a test sets what it exercises.
inline ServerSettings plain_settings(int slots) {
    return {.slots = slots, .unified = false, .cache_reuse = 0, .pooling = "", .ctx_extra = 0, .loras = 0, .cache_ram = 0,
            .idle_slots = false, .draft = 0, .context_shift = false, .kv_type = KvType::f32, .arch = "llama", .window = 8,
            .swa_full = false, .ctx_checkpoints = 32, .checkpoint_min_step = 8192, .ngram = false};
}

// The model context the oracles' tests size slots and the RAM cache with
// (the tiny model's).
inline constexpr int kTestCtx = 256;

inline Completion request(int slot, std::vector<int> prompt, int n_predict = 1) {
    Completion c;
    c.slot = slot, c.prompt = std::move(prompt), c.n_predict = n_predict;
    return c;
}

inline ServerAnswer answer(int slot, std::vector<int> tokens, int cache_n = 0) {
    ServerAnswer a;
    a.slot = slot, a.tokens = std::move(tokens), a.cache_n = cache_n;
    return a;
}

}  // namespace kvweld::sim::server::test
