// The reload op (ops::Reload, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// Rare: a model reload is a server's restart.
int ops::Reload::weight(const WeightSite& s) { return s.has(KVWELD_CAP_RELOAD) ? std::min(s.first, 3) : 0; }

std::vector<int> ops::Reload::eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_RELOAD)); }
ops::Reload ops::Reload::draw(const Simulator&, Entropy& e, std::uint32_t) {
    ops::Reload a{.same_weights = e.chance(0.5)};
    a.seed = e.seed();
    return a;
}
void ops::Reload::write(json& j, const ops::Reload& a) { j.update({{"same_weights", a.same_weights}, {"seed", a.seed}}); }
ops::Reload ops::Reload::read(const json& j) {
    return {json_field<bool>(j, "same_weights"), json_field<std::uint64_t>(j, "seed")};
}

// The reference takes the same weights the engine is given; every sequence
// starts over (the ABI's reload empties them).
void Simulator::run(const ops::Reload& op, int) {
    const std::uint64_t seed = op.same_weights ? weights_seed_ : op.seed;
    Model next = Model::random(config_.model, seed);
    make(calls::Reload{&next});
    if (seed == weights_seed_) drew(op, "same_weights");
    else drew(op, "new_weights");
    model_ = std::move(next);
    weights_generation_ += seed != weights_seed_;
    weights_seed_ = seed;
    ++model_generation_;
    requeue_all();
    publish(calls::Reload{&model_});
}

}  // namespace kvweld::sim
