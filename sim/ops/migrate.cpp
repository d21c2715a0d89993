// The migrate op (ops::Migrate, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// White box only: a diff compares two engines through the one interface they share.
int ops::Migrate::weight(const WeightSite& s) { return s.white_box ? s.first : 0; }

std::vector<int> ops::Migrate::eligible(const Simulator& s) {
    return s.white_box() && !s.free_seqs().empty() ? any_open(s) : std::vector<int>{};
}
ops::Migrate ops::Migrate::draw(const Simulator&, Entropy& e, std::uint32_t pick) { return {pick, e.pick()}; }
void ops::Migrate::write(json& j, const ops::Migrate& a) { j.update({{"pick", a.pick}, {"to", a.to}}); }
ops::Migrate ops::Migrate::read(const json& j) {
    return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "to")};
}

// White box: the request and its storage move to a free slot, whose held
// plan was built on other storage (or none).
void Simulator::run(const ops::Migrate& op, int from) {
    const std::vector<int> free = free_seqs();
    const int to = free[op.to % free.size()];
    const calls::Migrate call{from, to};
    make(call);
    requests_[std::size_t(to)] = std::move(requests_[std::size_t(from)]);
    requests_[std::size_t(from)].reset();
    kept_capacity_[std::size_t(to)] = kept_capacity_[std::size_t(from)];
    kept_capacity_[std::size_t(from)] = 0;
    publish(call);
}

}  // namespace kvweld::sim
