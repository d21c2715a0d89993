// The cvec op (ops::Cvec, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
// ways, and what it does (Simulator::run).

#include "sim/ops/invalid_call.hpp"
#include "sim/ops/row_parts.hpp"
#include "sim/ops/weight_site.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvweld::sim {

using namespace row;

// On the main stream right after lora's, on about 60% of the seeds.
int ops::Cvec::weight(const WeightSite& s) {
    return s.has(KVWELD_CAP_CVEC) && s.main.chance(0.6) ? int(s.main.range(1, 20)) : 0;
}

std::vector<int> ops::Cvec::eligible(const Simulator& s) { return when(can(s, KVWELD_CAP_CVEC)); }
// Three vectors' data, so a drawn one is often the one held, re-ranged.
ops::Cvec ops::Cvec::draw(const Simulator& s, Entropy& e, std::uint32_t) {
    ops::Cvec a{.clear = e.chance(0.25)};
    if (a.clear) return a;
    const int layers = s.config().model.n_layers;
    a.seed = 1 + e.below(3);
    a.start = int(e.range(1, std::max(1, layers - 1)));
    a.end = int(e.range(a.start, std::max(a.start, layers - 1)));
    return a;
}
void ops::Cvec::write(json& j, const ops::Cvec& a) {
    if (a.clear) j["clear"] = true;
    else j.update({{"seed", a.seed}, {"start", a.start}, {"end", a.end}});
}
ops::Cvec ops::Cvec::read(const json& j) {
    ops::Cvec a{.clear = optional_flag(j, "clear")};
    if (a.clear) return a;
    a.seed = json_field<std::uint64_t>(j, "seed");
    a.start = json_field<int>(j, "start");
    a.end = json_field<int>(j, "end");
    require(a.start >= 0 && a.end >= 0, "fields 'start' = ", a.start, " and 'end' = ", a.end, ": must be >= 0");
    return a;
}

void Simulator::run(const ops::Cvec& op, int) {
    std::optional<ControlVector> cvec;
    if (!op.clear) {
        const int layers = config_.model.n_layers, start = op.start % layers;
        cvec = ControlVector::random(config_.model, op.seed, start, std::max(start, op.end % layers));
    }
    const ControlVector* given = cvec ? &*cvec : nullptr;
    make(calls::SetCvec{given, nullptr, nullptr});
    if (given) drew(op, "set");
    else drew(op, "clear");
    const Adapters before = adapters_;
    adapters_.set_cvec(config_.model, cvec);
    publish(calls::SetCvec{given, &before, &adapters_});
}

// Invalid: a control vector past the model's layers.
std::optional<InvalidCall> ops::Cvec::past_layers(const InvalidSite& s) {
    if (!(s.capabilities & KVWELD_CAP_CVEC)) return std::nullopt;
    const int end = s.model.n_layers + int(s.v % 3);
    return InvalidCall{cat("a control vector over layers 1..", end, " (the model has ", s.model.n_layers, ")"),
                       std::to_string(end), [model = s.model, v = s.v, end](Engine& e) {
                           ControlVector cv = ControlVector::random(model, v, 1, 1);
                           cv.end = end;
                           e.apply(calls::SetCvec{&cv, nullptr, nullptr});
                       }};
}

}  // namespace kvweld::sim
