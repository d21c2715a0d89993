// The server ops' JSON (sim/server/server_ops.hpp): a during op both ways,
// and each bad field refused with its name.
#include "sim/server/server_ops.hpp"

#include "util/error.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>

namespace kvweld::sim::server {
namespace {

During a_during() {
    During d;
    d.stream.slot = 0, d.stream.prompt = {1, 2, 3}, d.stream.n_predict = 6, d.stream.n_cmpl = 2, d.stream.stream = true;
    d.index = 1, d.at_token = 3;
    Completion then;
    then.slot = 1, then.prompt = {4, 5};
    d.then = then;
    return d;
}

nlohmann::json as_json(const ServerOp& op) {
    nlohmann::json j;
    to_json(j, op);
    return j;
}

TEST(ServerOps, ADuringOpRoundTripsThroughJson) {
    for (const bool lora : {false, true}) {
        During d = a_during();
        if (lora) d.then = Lora{{0.5f, 1.0f}};
        const nlohmann::json j = as_json(ServerOp{d});
        EXPECT_EQ(j.at("op"), "during");
        const ServerOp back = server_op_from_json(j);
        EXPECT_EQ(as_json(back), j);
        EXPECT_EQ(std::get<During>(back.args).then.index(), lora ? 1u : 0u);
    }
}

TEST(ServerOps, ABadDuringOpIsRefusedNamingTheField) {
    const std::pair<const char*, std::function<void(nlohmann::json&)>> bad[] = {
        {"field 'stream': a during op's stream is streamed", [](nlohmann::json& j) { j["stream"]["stream"] = false; }},
        {"field 'stream': a during op's stream is streamed, pinned", [](nlohmann::json& j) { j["stream"]["slot"] = -1; }},
        {"'index'", [](nlohmann::json& j) { j["index"] = 2; }},
        {"'at_token'", [](nlohmann::json& j) { j["at_token"] = 6; }},
        {"field 'then': a completion pinned to a slot", [](nlohmann::json& j) { j["then"]["slot"] = -1; }},
        {"field 'then.op' = 'slot': complete or lora", [](nlohmann::json& j) { j["then"]["op"] = "slot"; }},
        {"needs 'stream' and 'then'", [](nlohmann::json& j) { j.erase("then"); }},
    };
    for (const auto& [says, change] : bad) {
        nlohmann::json j = as_json(ServerOp{a_during()});
        change(j);
        try {
            server_op_from_json(j);
            ADD_FAILURE() << "accepted: " << j.dump();
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
        }
    }
}

}  // namespace
}  // namespace kvweld::sim::server
