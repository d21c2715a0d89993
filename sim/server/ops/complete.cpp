// One completion request, alone: streamed or not, maybe cancelled, greedy
// or sampled, one completion or several of one prompt (n_cmpl).
#include "sim/server/server_oracle.hpp"
#include "sim/server/server_sim.hpp"
#include "util/cat.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim::server {

int Complete::weight(const ServerSettings& s) { return s.embeddings() ? 0 : 12; }

Complete Complete::draw(ServerDraw& d) {
    const int slots = d.settings().slots;
    Complete op{d.completion(d.chance(0.8) ? int(d.below(std::uint64_t(slots))) : -1)};
    Completion& c = op.request;
    if (d.chance(0.25)) c.temperature = 0.8, c.seed = std::uint32_t(d.below(1u << 30));
    // n_cmpl shares a prompt, which a context shift refuses ("cannot be used for shared prompt").
    if (slots > 1 && !d.fills_slot(c) && d.chance(0.15)) c.n_cmpl = int(d.range(2, slots));
    c.stream = d.chance(0.3);
    // A cut stream leaves the slot holding tokens nobody saw; a shifted chunk
    // of them could not be mirrored, so cancelling waits for seeds without
    // chunk reuse. Only a pinned request is cut: a stream's events name the
    // slot the request asked for (-1 when none), and only the final one, never
    // read, names the slot that served it.
    // With a RAM cache, the slot's tokens decide what is saved and loaded:
    // the stream is cut one token short, so the server holds none the
    // client did not see (how many it holds, GET /slots tells).
    if (c.stream && c.slot >= 0 && c.n_cmpl == 1 && c.n_predict > 1 && !d.fills_slot(c) && d.settings().cache_reuse == 0 &&
        d.chance(0.4))
        c.cancel_after = d.settings().cache_ram != 0 ? c.n_predict - 1 : int(d.range(1, c.n_predict - 1));
    return op;
}

void Complete::write(nlohmann::json& j, const Complete& a) { write_completion(j, a.request); }
Complete Complete::read(const nlohmann::json& j) { return {read_completion(j)}; }

void ServerSim::run(const Complete& op, std::size_t index, nlohmann::json& observed) {
    const std::vector<ServerAnswer> answers = send(op.request, cat("op ", index, " (complete)"));
    observed = observed_json(answers);
    judge_completion(op.request, answers, index);
}

}  // namespace kvweld::sim::server
