// The invalid calls the simulator draws (OpKind::invalid), each defined in
// the file of the op it is a wrong form of (sim/ops/invalid_call.hpp): a
// truncate past the length, a decode of a token outside the vocabulary, on
// a closed sequence or past n_ctx, an open of an open or out-of-range
// sequence, a copy onto itself, a shift past the length, a state cut short;
// a LoRA adapter of another shape, a
// control vector past the model's layers and a sampler chain wider than 64
// or the vocabulary, where the engine takes them. Each must be refused with an error that
// names the bad value (engine_abi.h) and must change nothing: a batch that
// holds a good pair beside the bad one is refused whole, and every row
// decoded afterwards is checked against the reference as usual, so an
// engine that half-applied the call is caught there.

#include "sim/ops/invalid_call.hpp"
#include "sim/ops/row_parts.hpp"
#include "sim/ops/weight_site.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <array>
#include <optional>

namespace kvweld::sim {

using namespace row;

bool names(const std::string& text, const std::string& value) {
    for (auto at = text.find(value); at != std::string::npos; at = text.find(value, at + 1)) {
        const bool starts = at == 0 || (!std::isdigit(static_cast<unsigned char>(text[at - 1])) && text[at - 1] != '-');
        const std::size_t end = at + value.size();
        const bool ends = end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]));
        if (starts && ends) return true;
    }
    return false;
}

// At most 10: a run of refusals decodes little.
int ops::Invalid::weight(const WeightSite& s) { return std::min(s.first, 10); }

std::vector<int> ops::Invalid::eligible(const Simulator& s) { return any_open(s); }
ops::Invalid ops::Invalid::draw(const Simulator&, Entropy& e, std::uint32_t pick) {
    ops::Invalid a{.pick = pick, .call = e.pick()};
    a.seed = e.seed();
    return a;
}
void ops::Invalid::write(json& j, const ops::Invalid& a) {
    j.update({{"pick", a.pick}, {"call", a.call}, {"seed", a.seed}});
}
ops::Invalid ops::Invalid::read(const json& j) {
    return {json_field<std::uint32_t>(j, "pick"), json_field<std::uint32_t>(j, "call"),
            json_field<std::uint64_t>(j, "seed")};
}

// Every wrong form an op has, each in its op's file, in the order a
// seed's `call` picks from: a new one goes last, so every recorded seed
// still makes the call it made.
constexpr std::array kVariants{
    &ops::Truncate::past_length, &ops::Step::token_out_of_range, &ops::Admit::open_twice,
    &ops::Admit::open_out_of_range, &ops::Step::on_closed, &ops::Fork::onto_itself,
    &ops::Step::over_capacity, &ops::Shift::past_length, &ops::Load::cut_short,
    &ops::Lora::other_shape, &ops::SetSampler::too_wide, &ops::Cvec::past_layers,
};

void Simulator::run(const ops::Invalid& op, int seq) {
    const Request& r = *requests_[std::size_t(seq)];
    const InvalidSite site{
        .seq = seq,
        .len = int(r.history.size()),
        .capacity = r.capacity,
        .v = op.seed,
        .seqs = config_.seqs,
        .capabilities = engine_->capabilities(),
        .model = config_.model,
        .free = free_seqs(),
        .batch =
            [&r, seq](Engine& e, std::vector<std::int32_t> seqs, std::vector<std::int32_t> tokens) {
                if (!r.queue.empty() && int(r.history.size()) < r.capacity) {
                    seqs.insert(seqs.begin(), seq);
                    tokens.insert(tokens.begin(), r.queue.front());
                }
                e.decode(seqs, tokens);
            },
        .state_size = [this, seq] { return engine_->state_save(seq).size(); },
    };
    std::vector<InvalidCall> calls;
    for (const auto variant : kVariants)
        if (std::optional<InvalidCall> c = variant(site)) calls.push_back(std::move(*c));
    const InvalidCall& call = calls[op.call % calls.size()];
    // The twin or peer is refused the same call first, so whatever a
    // refusal does to an engine's layout (a state load put back) happens to both.
    for (const auto& o : observers_) o->expect_refusal(call.run, call.what);
    try {
        call.run(*engine_);
    } catch (const Error& e) {
        const bool tensor = !call.tensor.empty() && std::string(e.what()).find(call.tensor) != std::string::npos;
        if (!names(e.what(), call.value) && !tensor)
            judge_.fail(Verdict::engine_error, Oracle::engine,
                        cat("the engine refused ", call.what, " without naming ", call.value, ": ", e.what()));
        ++stats_.refused;
        if (call.state_load) publish(calls::LoadRefused{seq});
        return;
    }
    judge_.fail(Verdict::engine_error, Oracle::engine, cat("the engine accepted ", call.what, ": it must be refused"));
}

}  // namespace kvweld::sim
