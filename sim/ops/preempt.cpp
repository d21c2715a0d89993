// The preempt op (ops::Preempt, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

int ops::Preempt::weight(const WeightSite& s) { return s.first; }

std::vector<int> ops::Preempt::eligible(const Simulator& s) { return with_history(s); }
ops::Preempt ops::Preempt::draw(const Simulator&, Entropy& e, std::uint32_t pick) { return {pick, draw_rewrite(e)}; }
void ops::Preempt::write(json& j, const ops::Preempt& a) {
    j["pick"] = a.pick;
    write_rewrite(j, a.rewrite);
}
ops::Preempt ops::Preempt::read(const json& j) { return {json_field<std::uint32_t>(j, "pick"), read_rewrite(j)}; }

void Simulator::run(const ops::Preempt& op, int seq) {
    const calls::Clear call{seq};
    make(call);
    Request& r = *requests_[std::size_t(seq)];
    const std::size_t dropped = r.history.size();
    requeue_from(r, 0);
    rewrite_requeued(op.rewrite, r, dropped);
    if (op.rewrite.on) drew(op, "rewrite");
    publish(call);
}

}  // namespace kvweld::sim
