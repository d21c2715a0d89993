// The server's own LoRA scales (POST /lora-adapters): every later request
// that names no adapters runs with them.
#include "sim/server/server_oracle.hpp"
#include "sim/server/server_sim.hpp"
#include "targets/llamaserver/http.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim::server {

int Lora::weight(const ServerSettings& s) { return s.loras > 0 ? 2 : 0; }

Lora Lora::draw(ServerDraw& d) { return {d.lora_scales()}; }

void Lora::write(nlohmann::json& j, const Lora& a) { j["scales"] = a.scales; }
Lora Lora::read(const nlohmann::json& j) { return {read_scales(j, "scales")}; }

void ServerSim::post_lora(const Lora& op, std::size_t index) {
    require(int(op.scales.size()) == config_.settings.loras, "op ", index, " (lora): ", op.scales.size(),
            " scales, the server has ", config_.settings.loras, " adapters");
    const auto got = targets::llamaserver::http_request(process_->port(), "POST", "/lora-adapters",
                                                        lora_body(op.scales).dump(), config_.request_timeout_s);
    require(got.status == 200, "status ", got.status, ": ", got.body.substr(0, 300));
}

void ServerSim::judge_lora(const Lora& op, std::size_t index) {
    for (const auto& o : oracles_) {
        const std::string why = o->on_lora(op);
        if (!why.empty()) fail(index, o->name(), why);
    }
}

void ServerSim::run(const Lora& op, std::size_t index, nlohmann::json& observed) {
    post_lora(op, index);
    observed = nlohmann::json::object();
    judge_lora(op, index);
}

}  // namespace kvweld::sim::server
