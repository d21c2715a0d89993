// The step op (ops::Step, sim/ops.hpp): its weight, when it may run, its draw, its JSON both
// ways, and what it does (Simulator::run).

#include "sim/ops/invalid_call.hpp"
#include "sim/ops/row_parts.hpp"
#include "sim/ops/weight_site.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/choose.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace kvweld::sim {

using namespace row;

namespace {

// A step's output subset comes from its own seed, so the ops a seed draws
// did not change when output subsets came.
constexpr std::uint64_t kOutputsStream = 0x6f7574707574732dULL;
constexpr int kMaxCallTokens = 512;  // one decode call's tokens (llama.cpp's batch)
constexpr std::uint64_t kParkStream = 0x7061726b65642d74ULL;

}  // namespace

// Every seed decodes: drawn on the main stream right after admit's.
int ops::Step::weight(const WeightSite& s) { return int(s.main.range(60, 100)); }

std::vector<int> ops::Step::eligible(const Simulator& s) {
    return open_where(s, [](const Request& r) { return !r.done(); });
}
// Each sequence takes part with its own chance and asks for 1..max_chunk
// tokens; half the prefill chunks want their last row only, where the
// engine can say so.
ops::Step ops::Step::draw(const Simulator& s, Entropy& e, std::uint32_t) {
    ops::Step a;
    a.wants = wants_for(s, [&] { return e.chance(0.75) ? int(e.range(1, s.config().max_chunk)) : 0; });
    a.seed = e.seed();
    a.last_only = can(s, KVWELD_CAP_OUTPUTS) && Rng(a.seed ^ kOutputsStream).chance(0.5);
    return a;
}
void ops::Step::write(json& j, const ops::Step& a) {
    j.update({{"wants", a.wants}, {"seed", a.seed}});
    if (a.last_only) j["outputs"] = "last";
}
ops::Step ops::Step::read(const json& j) {
    ops::Step a{.wants = non_negative(j, "wants"), .seed = json_field<std::uint64_t>(j, "seed")};
    if (j.contains("outputs")) {
        const std::string outputs = json_field<std::string>(j, "outputs");
        require(outputs == "last", "field 'outputs' = '", outputs, "': expected \"last\" (or no field: every row)");
        a.last_only = true;
    }
    return a;
}

// One batched step: each sequence asked for tokens feeds a prefill chunk
// or its pending token and drafts; after the call, rejected drafts are
// truncated away and each sequence whose queue ran out gets its next token.
bool Simulator::run(const ops::Step& op, int) {
    Rng rng(op.seed);
    std::vector<Pair> pairs;
    struct Part {
        int seq;
        std::size_t first, count;
        int accepted;  // drafts kept (decoding) or -1 (prefill)
    };
    std::vector<Part> parts;
    for (int s = 0; s < config_.seqs && s < int(op.wants.size()); ++s) {
        auto& r = requests_[std::size_t(s)];
        const int room = r ? r->capacity - int(r->history.size()) : 0;
        const int budget = kMaxCallTokens - int(pairs.size());
        int k = std::min({op.wants[std::size_t(s)], config_.max_chunk, room, budget});
        if (!r || r->done() || k <= 0) continue;
        Part part{s, pairs.size(), 0, -1};
        const int pos = int(r->history.size());
        if (r->decoding) {
            std::vector<int> fed{r->queue.front()};
            for (int d = 1; d < k; ++d) fed.push_back(int(rng.below(std::uint64_t(config_.model.vocab))));
            part.accepted = 0;
            while (part.accepted < k - 1 && rng.chance(config_.accept_mean)) ++part.accepted;
            for (int i = 0; i < k; ++i) pairs.push_back({s, fed[std::size_t(i)], pos + i});
            stats_.drafts += std::uint64_t(k - 1);
            stats_.rejected += std::uint64_t(k - 1 - part.accepted);
        } else {
            k = std::min(k, int(r->queue.size()));
            const bool last_only = op.last_only && (engine_->capabilities() & KVWELD_CAP_OUTPUTS);
            for (int i = 0; i < k; ++i) pairs.push_back({s, r->queue[std::size_t(i)], pos + i, !last_only || i == k - 1});
        }
        part.count = std::size_t(k);
        parts.push_back(part);
    }
    if (pairs.empty()) return false;
    const Decoding decoded = decode(pairs);
    if (decoded.kept) {  // stopped by the abort callback
        for (const Part& part : parts) adopt_kept(part.seq, part.accepted < 0, decoded.kept->at(part.seq), pairs, part.first);
        return true;
    }
    const std::vector<std::vector<float>>& want = decoded.want;
    for (const Part& part : parts) {
        Request& r = *requests_[std::size_t(part.seq)];
        const std::size_t kept = part.accepted < 0 ? part.count : std::size_t(1 + part.accepted);
        for (std::size_t i = 0; i < kept; ++i) r.history.push_back(pairs[part.first + i].token);
        r.queue.erase(r.queue.begin(), r.queue.begin() + long(std::min(r.queue.size(), part.accepted < 0 ? part.count : 1)));
        if (kept < part.count) truncate_rejected(part.seq, int(r.history.size()));  // rewind to what was accepted
        r.generated += part.accepted > 0 ? part.accepted : 0;
        if (!r.queue.empty()) continue;
        r.decoding = false;
        if (r.generated >= r.max_new) continue;  // done
        if (int(r.history.size()) >= r.capacity) {  // full: its next token waits for a context shift
            Rng park(op.seed ^ kParkStream ^ std::uint64_t(part.seq));  // not the step's stream: its draws stay as they were
            r.parked = choose_token(want[part.first + kept - 1], config_.sampled, park);
            continue;
        }
        r.queue.push_back(choose_token(want[part.first + kept - 1], config_.sampled, rng));
        r.decoding = true;
        ++r.generated;
    }
    return true;
}

// Invalid: a decode of a token outside the vocabulary.
std::optional<InvalidCall> ops::Step::token_out_of_range(const InvalidSite& s) {
    const int vocab = s.model.vocab, token = s.v % 2 ? vocab + int(s.v % 7) : -1 - int(s.v % 3);
    return InvalidCall{cat("a decode of token ", token, " (vocab ", vocab, ")"), std::to_string(token),
                       [batch = s.batch, seq = s.seq, token](Engine& e) { batch(e, {seq}, {token}); }};
}

// Invalid: a decode on a closed sequence, where there is one.
std::optional<InvalidCall> ops::Step::on_closed(const InvalidSite& s) {
    if (s.free.empty()) return std::nullopt;
    const int closed = s.free[s.v % s.free.size()];
    return InvalidCall{cat("a decode on sequence ", closed, ", which is closed"), std::to_string(closed),
                       [batch = s.batch, closed](Engine& e) { batch(e, {closed}, {0}); }};
}

// Invalid: a decode of one position more than the sequence has room for.
std::optional<InvalidCall> ops::Step::over_capacity(const InvalidSite& s) {
    const int seq = s.seq, over = s.capacity - s.len + 1;
    return InvalidCall{cat("a decode of ", over, " tokens on sequence ", seq, " at length ", s.len, " (capacity ",
                           s.capacity, ")"),
                       std::to_string(s.capacity), [seq, over](Engine& e) {
                           e.decode(std::vector<std::int32_t>(std::size_t(over), seq),
                                    std::vector<std::int32_t>(std::size_t(over), 0));
                       }};
}

}  // namespace kvweld::sim
