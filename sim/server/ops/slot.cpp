// A slot saved to a file, restored from one (into any slot), or erased
// (llama-server's /slots/{id}?action=...).
#include "sim/server/server_oracle.hpp"
#include "sim/server/server_sim.hpp"
#include "sim/json_field.hpp"
#include "targets/llamaserver/http.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim::server {

int Slot::weight(const ServerSettings& s) { return s.embeddings() ? 0 : 3; }

// Nothing saved in the file yet: a save instead of a restore.
Slot Slot::draw(ServerDraw& d) {
    Slot op;
    op.slot = int(d.below(std::uint64_t(d.settings().slots)));
    op.file = int(d.below(ServerDraw::kFiles));
    op.action = SlotAction(d.below(3));
    if (op.action == SlotAction::restore && !d.saved(op.file)) op.action = SlotAction::save;
    return op;
}

void Slot::write(nlohmann::json& j, const Slot& a) {
    j["action"] = to_string(a.action), j["slot"] = a.slot, j["file"] = a.file;
}

Slot Slot::read(const nlohmann::json& j) {
    Slot op;
    const std::string action = json_field<std::string>(j, "action");
    bool known = false;
    for (SlotAction a : {SlotAction::save, SlotAction::restore, SlotAction::erase})
        if (to_string(a) == action) op.action = a, known = true;
    require(known, "field 'action' = '", action, "': one of save, restore, erase");
    op.slot = json_int_in(j, "slot", 0, 63);
    op.file = json_int_in(j, "file", 0, ServerDraw::kFiles - 1);
    return op;
}

void ServerSim::run(const Slot& op, std::size_t index, nlohmann::json& observed) {
    const std::string name(to_string(op.action));
    const std::string body = op.action == SlotAction::erase ? "{}" : cat("{\"filename\": \"slot-", op.file, ".bin\"}");
    const auto got = targets::llamaserver::http_request(process_->port(), "POST", cat("/slots/", op.slot, "?action=", name),
                                                        body, config_.request_timeout_s);
    require(got.status == 200, "status ", got.status, ": ", got.body.substr(0, 300));
    const nlohmann::json j = nlohmann::json::parse(got.body, nullptr, false);
    const std::string field = op.action == SlotAction::save ? "n_saved" : op.action == SlotAction::restore ? "n_restored" : "n_erased";
    require(j.is_object() && j.contains(field), "no ", field, " in '", got.body.substr(0, 200), "'");
    const int n = j.at(field).get<int>();
    observed = {{field, n}};
    for (const auto& o : oracles_) {
        const std::string why = o->on_slot(op, n);
        if (!why.empty()) fail(index, o->name(), cat("slot ", op.slot, " ", name, " (file ", op.file, "): ", why));
    }
}

}  // namespace kvweld::sim::server
