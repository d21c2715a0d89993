// The truncate op (ops::Truncate, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

int ops::Truncate::weight(const WeightSite& s) { return s.first; }

std::vector<int> ops::Truncate::eligible(const Simulator& s) { return with_history(s); }
ops::Truncate ops::Truncate::draw(const Simulator&, Entropy& e, std::uint32_t pick) {
    ops::Truncate a{.pick = pick, .length = e.pick()};
    a.rewrite = draw_rewrite(e);
    return a;
}
void ops::Truncate::write(json& j, const ops::Truncate& a) {
    j.update({{"pick", a.pick}, {"length", a.length}});
    write_rewrite(j, a.rewrite);
}
ops::Truncate ops::Truncate::read(const json& j) {
    return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "length"), read_rewrite(j)};
}

void Simulator::run(const ops::Truncate& op, int seq) {
    Request& r = *requests_[std::size_t(seq)];
    const int n = int(op.length % (r.history.size() + 1));
    const calls::Truncate call{seq, n};
    if (!make_refusable(call)) return;  // the sequence holds what it held
    const std::size_t dropped = r.history.size() - std::size_t(n);
    requeue_from(r, std::size_t(n));
    rewrite_requeued(op.rewrite, r, dropped);
    if (op.rewrite.on) drew(op, "rewrite");
    publish(call);
}

// Invalid: a truncate past the sequence's length.
std::optional<InvalidCall> ops::Truncate::past_length(const InvalidSite& s) {
    const int seq = s.seq, past = s.len + 1 + int(s.v % 4);
    return InvalidCall{cat("truncate(", seq, ", ", past, ") past its length ", s.len), std::to_string(past),
                       [seq, past](Engine& e) { e.apply(calls::Truncate{seq, past}); }};
}

}  // namespace kvweld::sim
