// The shift op (ops::Shift, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// The state stream's first pair: on about half the seeds.
int ops::Shift::weight(const WeightSite& s) { return s.has(KVWELD_CAP_SHIFT) ? s.own(kStateStream, 0, 1, 12, 0.5) : 0; }

// A server shifts a context that is full; the simulator's requests are
// short (a shift at any length moves rows the same way), and a full one
// waits for a shift with its next token parked.
std::vector<int> ops::Shift::eligible(const Simulator& s) {
    if (!can(s, KVWELD_CAP_SHIFT)) return {};
    return open_where(s, [](const Request& r) { return r.history.size() >= 2; });
}
// Half keep a prefix (llama-server's n_keep), half none.
ops::Shift ops::Shift::draw(const Simulator&, Entropy& e, std::uint32_t pick) {
    ops::Shift a{.pick = pick};
    a.keep = e.chance(0.5) ? 0 : e.pick();
    a.discard = e.pick();
    a.twice = e.chance(0.5);
    return a;
}
void ops::Shift::write(json& j, const ops::Shift& a) {
    j.update({{"pick", a.pick}, {"keep", a.keep}, {"discard", a.discard}});
    if (a.twice) j["twice"] = true;
}
ops::Shift ops::Shift::read(const json& j) {
    return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "keep"),
            json_field<std::uint32_t>(j, "discard"), optional_flag(j, "twice")};
}

bool Simulator::shift_once(int seq, int p0, int p1) {
    Request& r = *requests_[std::size_t(seq)];
    const calls::Shift call{seq, p0, p1, int(r.history.size())};
    if (!make_refusable(call)) return false;  // the sequence holds what it held; a parked token waits on
    r.history.erase(r.history.begin() + p0, r.history.begin() + p1);
    publish(call);
    if (r.parked && r.queue.empty()) {  // the room it waited for
        r.queue.push_back(*r.parked);
        r.decoding = true;
        ++r.generated;
    }
    r.parked.reset();
    return true;
}

// n_keep = keep mod the length, then half the positions after it dropped
// (llama-server's n_discard) or any count of them; `twice`: a second shift of the same
// sequence before its next decode, so rotations owed add up.
void Simulator::run(const ops::Shift& op, int seq) {
    for (int round = 0; round < (op.twice ? 2 : 1); ++round) {
        const int len = int(requests_[std::size_t(seq)]->history.size());
        if (len < 1) return;
        const int keep = int(op.keep % std::uint32_t(len)), after = len - keep;
        const std::uint32_t draw = op.discard >> (16 * round);
        const int discard = draw & 1 ? std::max(1, after / 2) : 1 + int((draw >> 1) % std::uint32_t(after));
        if (!shift_once(seq, keep, keep + discard)) return;
        if (keep > 0) drew(op, "keep_prefix");
        if (round == 1) drew(op, "twice");
    }
}

// Invalid: a shift of positions past the sequence's length.
std::optional<InvalidCall> ops::Shift::past_length(const InvalidSite& s) {
    if (!(s.capabilities & KVWELD_CAP_SHIFT)) return std::nullopt;
    const int seq = s.seq, len = s.len, past = len + 1 + int(s.v % 4), p0 = std::min(len, 1);
    return InvalidCall{cat("a shift of positions [", p0, ", ", past, ") of sequence ", seq, " at length ", len),
                       std::to_string(past), [seq, p0, past, len](Engine& e) { e.apply(calls::Shift{seq, p0, past, len}); }};
}

}  // namespace kvweld::sim
