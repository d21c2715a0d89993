// A request sent while a stream runs, at a moment the stream defines
// (sim/server/server_ops.hpp, During): the stream's events are read as
// they come, and at the moment the other request goes out on a connection
// of its own and is answered before the stream is read on.
#include "sim/server/server_oracle.hpp"
#include "sim/server/server_sim.hpp"
#include "sim/server/server_wire.hpp"
#include "sim/json_field.hpp"
#include "targets/llamaserver/http.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim::server {

// Not with idle slots cached in RAM: a stream's end would then save its
// slots there while the other request may be loading from it.
int During::weight(const ServerSettings& s) { return s.embeddings() || (s.cache_ram != 0 && s.idle_slots) ? 0 : 4; }

During During::draw(ServerDraw& d) {
    const int slots = d.settings().slots;
    During op;
    op.stream = d.completion(int(d.below(std::uint64_t(slots))));
    Completion& c = op.stream;
    c.stream = true;
    if (d.chance(0.25)) c.temperature = 0.8, c.seed = std::uint32_t(d.below(1u << 30));
    // Several completions share the prompt's cells while they run: the moment to probe.
    if (slots > 1 && !d.fills_slot(c) && d.chance(0.5)) c.n_cmpl = int(d.range(2, slots));
    op.index = int(d.below(std::uint64_t(c.n_cmpl)));
    op.at_token = c.n_predict > 1 && d.chance(0.5) ? int(d.range(1, c.n_predict - 1)) : 0;
    if (d.settings().loras > 0 && d.chance(0.3)) op.then = Lora{d.lora_scales()};
    else op.then = d.completion(int(d.below(std::uint64_t(slots))));
    return op;
}

void During::write(nlohmann::json& j, const During& a) {
    write_completion(j["stream"], a.stream);
    j["index"] = a.index, j["at_token"] = a.at_token;
    nlohmann::json& then = j["then"];
    if (const auto* c = std::get_if<Completion>(&a.then)) then["op"] = "complete", write_completion(then, *c);
    else then["op"] = "lora", Lora::write(then, std::get<Lora>(a.then));
}

During During::read(const nlohmann::json& j) {
    require(j.contains("stream") && j.contains("then"), "a 'during' op needs 'stream' and 'then'");
    During op;
    op.stream = read_completion(j.at("stream"));
    const Completion& c = op.stream;
    require(c.stream && c.slot >= 0 && c.cancel_after == 0,
            "field 'stream': a during op's stream is streamed, pinned to a slot and read to its end");
    op.index = json_int_in(j, "index", 0, c.n_cmpl - 1);
    op.at_token = json_int_in(j, "at_token", 0, c.n_predict - 1);
    const nlohmann::json& then = j.at("then");
    const std::string kind = json_field<std::string>(then, "op");
    if (kind == "lora") {
        op.then = Lora::read(then);
    } else {
        require(kind == "complete", "field 'then.op' = '", kind, "': complete or lora");
        Completion other = read_completion(then);
        require(other.slot >= 0 && !other.stream, "field 'then': a completion pinned to a slot, not streamed");
        op.then = std::move(other);
    }
    return op;
}

void ServerSim::run(const During& op, std::size_t index, nlohmann::json& observed) {
    nlohmann::json then_observed;
    std::vector<ServerAnswer> then_answers;
    int seen = -1;  // the tokens completion `index` had given when `then` went out
    bool ended = false;
    auto send_then = [&] {
        if (const auto* c = std::get_if<Completion>(&op.then)) {
            then_answers = send(*c, cat("op ", index, " (during, then)"));
            then_observed = observed_json(then_answers);
        } else {
            post_lora(std::get<Lora>(op.then), index);
            then_observed = nlohmann::json::object();
        }
    };
    const std::vector<ServerAnswer> answers = send(op.stream, cat("op ", index, " (during, stream)"), [&](const std::string& raw) {
        if (seen >= 0) return;
        for (const ServerAnswer& a : parse_completion(raw, true))
            if (a.index == op.index && (op.at_token > 0 ? int(a.tokens.size()) >= op.at_token : !a.cut))
                seen = int(a.tokens.size()), ended = !a.cut;
        if (seen >= 0) send_then();
    });
    // The stream ended (its last read) before the moment came: sent after it.
    if (seen < 0) seen = int(answers.at(std::size_t(op.index)).tokens.size()), ended = true, send_then();
    observed = {{"stream", observed_json(answers)}, {"then", then_observed}, {"seen", seen}, {"ended", ended}};
    judge_completion(op.stream, answers, index);
    if (const auto* c = std::get_if<Completion>(&op.then)) judge_completion(*c, then_answers, index);
    else judge_lora(std::get<Lora>(op.then), index);
}

}  // namespace kvweld::sim::server
