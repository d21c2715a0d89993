// The retire op (ops::Retire, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

int ops::Retire::weight(const WeightSite& s) { return s.first; }

std::vector<int> ops::Retire::eligible(const Simulator& s) { return any_open(s); }
ops::Retire ops::Retire::draw(const Simulator&, Entropy&, std::uint32_t pick) { return {pick}; }
void ops::Retire::write(json& j, const ops::Retire& a) { j["pick"] = a.pick; }
ops::Retire ops::Retire::read(const json& j) { return {json_field<std::uint32_t>(j, "pick")}; }

void Simulator::run(const ops::Retire&, int seq) {
    const calls::Close call{seq};
    make(call);
    kept_capacity_[std::size_t(seq)] = requests_[std::size_t(seq)]->capacity;  // the slot keeps its storage
    requests_[std::size_t(seq)].reset();
    publish(call);
}

}  // namespace kvweld::sim
