// What the server simulator's oracle tests build their exchanges from: a
// request, and an answer as the server would give it.
#pragma once

#include "sim/server/server_exchange.hpp"

#include <utility>
#include <vector>

namespace kvweld::sim::server::test {

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
