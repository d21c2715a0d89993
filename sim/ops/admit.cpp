// The admit op (ops::Admit, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
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

// Every seed opens requests: drawn on the main stream right after the
// first draws (its own first draw is not used).
int ops::Admit::weight(const WeightSite& s) { return int(s.main.range(10, 60)); }

std::vector<int> ops::Admit::eligible(const Simulator& s) { return s.free_seqs(); }
ops::Admit ops::Admit::draw(const Simulator& s, Entropy& e, std::uint32_t pick) {
    const SimConfig& c = s.config();
    ops::Admit a{.pick = pick};
    a.prompt.resize(std::size_t(e.range(1, c.max_prompt)));
    for (int& t : a.prompt) t = int(e.below(std::uint64_t(c.model.vocab)));
    a.max_new = int(e.range(0, c.max_new));
    a.capacity = e.pick();
    a.recycle = e.chance(0.5);
    return a;
}
void ops::Admit::write(json& j, const ops::Admit& a) {
    j.update({{"pick", a.pick}, {"prompt", a.prompt}, {"max_new", a.max_new}, {"capacity", a.capacity},
              {"recycle", a.recycle}});
}
ops::Admit ops::Admit::read(const json& j) {
    ops::Admit a{.pick = json_field<std::uint32_t>(j, "pick"), .prompt = non_negative(j, "prompt")};
    require(!a.prompt.empty(), "field 'prompt' is empty: a request needs a prompt");
    a.max_new = json_field<int>(j, "max_new");
    require(a.max_new >= 0, "field 'max_new' = ", a.max_new, ": must be >= 0");
    a.capacity = json_field<std::uint32_t>(j, "capacity");
    a.recycle = json_field<bool>(j, "recycle");
    return a;
}

void Simulator::run(const ops::Admit& op, int seq) {
    for (int t : op.prompt)
        require(t < config_.model.vocab, "admit: prompt token ", t, " out of range: vocab is ", config_.model.vocab);
    Request r;
    r.capacity = config_.n_ctx;
    MemoryCall call = calls::Open{seq};
    if (white_box_) {  // a capacity of the seed's, or the storage the slot kept
        const bool recycle = op.recycle && kept_capacity_[std::size_t(seq)] > 0;
        if (recycle) r.capacity = kept_capacity_[std::size_t(seq)];
        else if (!config_.capacities.empty()) r.capacity = config_.capacities[op.capacity % config_.capacities.size()];
        call = calls::OpenSized{seq, r.capacity, recycle};
    }
    make(call);
    r.queue.assign(op.prompt.begin(), op.prompt.begin() + long(std::min(op.prompt.size(), std::size_t(r.capacity))));
    r.max_new = op.max_new;
    requests_[std::size_t(seq)].emplace(std::move(r));
    publish(call);
    ++stats_.requests;
}

// Invalid: an open of a sequence that is open.
std::optional<InvalidCall> ops::Admit::open_twice(const InvalidSite& s) {
    const int seq = s.seq;
    return InvalidCall{cat("an open of sequence ", seq, ", which is open"), std::to_string(seq),
                       [seq](Engine& e) { e.apply(calls::Open{seq}); }};
}

// Invalid: an open of a sequence past the count the engine was made with.
std::optional<InvalidCall> ops::Admit::open_out_of_range(const InvalidSite& s) {
    const int beyond = s.seqs + int(s.v % 3);
    return InvalidCall{cat("an open of sequence ", beyond, " (", s.seqs, " sequences)"), std::to_string(beyond),
                       [beyond](Engine& e) { e.apply(calls::Open{beyond}); }};
}

}  // namespace kvweld::sim
