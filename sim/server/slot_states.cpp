// The slot model's plain parts (sim/server/slot_states.hpp).
#include "sim/server/slot_states.hpp"

#include <algorithm>

namespace kvweld::sim::server {

ReusePlan plan_reuse(const std::vector<int>& held, const std::vector<int>& prompt, int cache_reuse) {
    ReusePlan plan;
    std::size_t n_past = 0;
    while (n_past < held.size() && n_past < prompt.size() && held[n_past] == prompt[n_past]) ++n_past;
    for (std::size_t from = n_past, to = n_past; cache_reuse > 0 && from < held.size() && to < prompt.size();) {
        std::size_t n = 0;
        while (from + n < held.size() && to + n < prompt.size() && held[from + n] == prompt[to + n]) ++n;
        if (n < std::size_t(cache_reuse)) {
            ++from;
            continue;
        }
        plan.chunks.push_back({int(from), int(to), int(n)});
        n_past += n, from += n, to += n;
    }
    plan.n_past = int(std::min(n_past, prompt.size() - 1));
    return plan;
}

const std::vector<float>& scales_of(const Completion& c, const std::vector<float>& server_scales) {
    return c.lora.empty() ? server_scales : c.lora;
}

std::vector<const ServerAnswer*> parent_first(const std::vector<ServerAnswer>& answers) {
    std::vector<const ServerAnswer*> out;
    for (const ServerAnswer& a : answers) out.push_back(&a);
    std::stable_sort(out.begin(), out.end(), [](const ServerAnswer* x, const ServerAnswer* y) { return x->index < y->index; });
    return out;
}

void keep_first(std::string& wrong, const std::string& why, std::size_t answers, const ServerAnswer& a) {
    if (wrong.empty() && !why.empty()) wrong = cat(answers > 1 ? cat("completion ", a.index, ": ") : "", why);
}

}  // namespace kvweld::sim::server
