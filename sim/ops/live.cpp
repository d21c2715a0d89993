// The live op (ops::Live, sim/ops.hpp): when it may run, its draw, its JSON both
// ways, and what it does (Simulator::run).

#include "sim/ops/row_parts.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvweld::sim {

using namespace row;

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
