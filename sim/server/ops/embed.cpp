// Pooled embeddings of one or more inputs in one request (a server started
// with --embedding); each input's embedding is judged on its own.
#include "sim/server/server_oracle.hpp"
#include "sim/server/server_sim.hpp"
#include "sim/json_field.hpp"
#include "targets/llamaserver/http.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim::server {

int Embed::weight(const ServerSettings& s) { return s.embeddings() ? 1 : 0; }

// Up to one input per slot, each a drawn prompt.
Embed Embed::draw(ServerDraw& d) {
    Embed op;
    const int n = int(d.range(1, d.settings().slots));
    for (int i = 0; i < n; ++i) op.inputs.push_back(d.completion(-1).prompt);
    return op;
}

void Embed::write(nlohmann::json& j, const Embed& a) { j["inputs"] = a.inputs; }

Embed Embed::read(const nlohmann::json& j) {
    Embed op{json_field<std::vector<std::vector<int>>>(j, "inputs")};
    require(!op.inputs.empty(), "field 'inputs' is empty: an embedding request needs at least one input");
    for (const std::vector<int>& input : op.inputs) require(!input.empty(), "field 'inputs' holds an empty input");
    return op;
}

void ServerSim::run(const Embed& op, std::size_t index, nlohmann::json& observed) {
    const nlohmann::json body = {{"content", op.inputs}};
    const auto got = targets::llamaserver::http_request(process_->port(), "POST", "/embedding", body.dump(),
                                                        config_.request_timeout_s);
    require(got.status == 200, "status ", got.status, ": ", got.body.substr(0, 300));
    // [{"index": i, "embedding": [[...]]}, ...]: one pooled row per input.
    const nlohmann::json j = nlohmann::json::parse(got.body, nullptr, false);
    require(j.is_array() && j.size() == op.inputs.size(), op.inputs.size(), " inputs, but the answer is '",
            got.body.substr(0, 200), "'");
    std::vector<std::vector<float>> embeddings(op.inputs.size());
    for (const nlohmann::json& one : j) {
        const std::size_t i = one.value("index", std::size_t(0));
        require(i < op.inputs.size() && one.contains("embedding") && one["embedding"].size() == 1,
                "not one pooled embedding per input: '", one.dump().substr(0, 200), "'");
        embeddings[i] = one["embedding"][0].get<std::vector<float>>();
    }
    observed = nlohmann::json::object();
    for (const auto& o : oracles_) {
        const std::string why = o->on_embedding(op, embeddings);
        if (!why.empty()) fail(index, o->name(), why);
    }
}

}  // namespace kvweld::sim::server
