// The fork op (ops::Fork, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

int ops::Fork::weight(const WeightSite& s) { return s.has(KVWELD_CAP_COPY_SEQ) ? s.first : 0; }

std::vector<int> ops::Fork::eligible(const Simulator& s) {
    return s.config().seqs > 1 ? with_history(s) : std::vector<int>{};
}
ops::Fork ops::Fork::draw(const Simulator&, Entropy& e, std::uint32_t pick) {
    ops::Fork a{.pick = pick, .to = e.pick()};
    a.onto_open = e.chance(0.3);
    return a;
}
void ops::Fork::write(json& j, const ops::Fork& a) {
    j.update({{"pick", a.pick}, {"to", a.to}});
    if (a.onto_open) j["onto_open"] = true;
}
ops::Fork ops::Fork::read(const json& j) {
    return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "to"), optional_flag(j, "onto_open")};
}

// A free sequence, or with onto_open (or none free) another open one,
// whose positions the copy replaces.
int Simulator::fork_destination(const ops::Fork& op, int src) const {
    std::vector<int> open;
    for (int s = 0; s < config_.seqs; ++s)
        if (s != src && requests_[std::size_t(s)]) open.push_back(s);
    const std::vector<int> free = free_seqs();
    const std::vector<int>& to = (op.onto_open && !open.empty()) || free.empty() ? open : free;
    return to[op.to % to.size()];
}

void Simulator::run(const ops::Fork& op, int src) {
    const int dst = fork_destination(op, src);
    const calls::Copy call{src, dst, !requests_[std::size_t(dst)]};
    make(call);
    if (call.opened) drew(op, "onto_free");
    else drew(op, "onto_open");
    requests_[std::size_t(dst)] = requests_[std::size_t(src)];
    publish(call);
    ++stats_.requests;
}

// Invalid: a copy of a sequence onto itself.
std::optional<InvalidCall> ops::Fork::onto_itself(const InvalidSite& s) {
    if (!(s.capabilities & KVWELD_CAP_COPY_SEQ)) return std::nullopt;
    const int seq = s.seq;
    return InvalidCall{cat("a copy of sequence ", seq, " onto itself"), std::to_string(seq),
                       [seq](Engine& e) { e.apply(calls::Copy{seq, seq}); }};
}

}  // namespace kvweld::sim
