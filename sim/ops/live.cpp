// The live op (ops::Live, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
// ways, and what it does (Simulator::run).

#include "sim/ops/row_parts.hpp"
#include "sim/ops/weight_site.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvweld::sim {

using namespace row;

constexpr std::uint64_t kLiveStream = 0x6c6976652d6f7073ULL;

// Where the engine (and a peer) lists live settings: on a stream of its
// own, on about two seeds in three (several settings share it).
int ops::Live::weight(const WeightSite& s) {
    const EngineChoice& e = s.config.engine;
    const bool listed = !engine_live_settings(e.engine).empty() && (!e.peer || !engine_live_settings(e.peer->engine).empty());
    return listed ? s.own(kLiveStream, 0, 2, 12, 0.67) : 0;
}

// One of the live settings the engine (and a peer) lists, at one of its values.
std::vector<int> ops::Live::eligible(const Simulator& s) { return when(!s.live_settings().empty()); }
ops::Live ops::Live::draw(const Simulator& s, Entropy& e, std::uint32_t) {
    const auto& settings = s.live_settings();
    const abi::LiveSetting& setting = settings[e.below(settings.size())];
    return {setting.key, setting.values[e.below(setting.values.size())]};
}
void ops::Live::write(json& j, const ops::Live& a) { j.update({{"key", a.key}, {"value", a.value}}); }
ops::Live ops::Live::read(const json& j) {
    ops::Live a{json_field<std::string>(j, "key"), json_field<std::string>(j, "value")};
    require(!a.key.empty(), "field 'key' is empty: a live setting needs a name");
    return a;
}

void Simulator::run(const ops::Live& op, int) {
    const calls::SetLive call{op.key, op.value};
    make(call);
    publish(call);
}

}  // namespace kvweld::sim
