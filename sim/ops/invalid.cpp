// The invalid calls the simulator draws (OpKind::invalid): a
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

#include "sim/ops/row_parts.hpp"
#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <functional>

namespace kvweld::sim {

using namespace row;

namespace {

struct Call {
    std::string what;   // for messages
    std::string value;  // the bad value the refusal must name
    std::function<void(Engine&)> run;  // on the engine, and on its twin where there is one
    // Or this, where the bad value is a shape: the tensor it is wrong in
    // (llama.cpp names the tensor, not its dimensions).
    std::string tensor = {};
    bool state_load = false;  // the rule is told of a refused state load (an engine may put the sequence back)
};

// `value` as a whole number in `text` (not the 1 of "12" or of "-1").
bool names(const std::string& text, const std::string& value) {
    for (auto at = text.find(value); at != std::string::npos; at = text.find(value, at + 1)) {
        const bool starts = at == 0 || (!std::isdigit(static_cast<unsigned char>(text[at - 1])) && text[at - 1] != '-');
        const std::size_t end = at + value.size();
        const bool ends = end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]));
        if (starts && ends) return true;
    }
    return false;
}

}  // namespace

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

void Simulator::run(const ops::Invalid& op, int seq) {
    const Request& r = *requests_[std::size_t(seq)];
    const int len = int(r.history.size()), vocab = config_.model.vocab;
    const std::uint64_t v = op.seed;
    // A pair the sequence could take, so a batch is refused for its bad pair alone.
    const auto batch = [&](Engine& e, std::vector<std::int32_t> seqs, std::vector<std::int32_t> tokens) {
        if (!r.queue.empty() && len < r.capacity) {
            seqs.insert(seqs.begin(), seq);
            tokens.insert(tokens.begin(), r.queue.front());
        }
        e.decode(seqs, tokens);
    };
    std::vector<Call> calls;
    const int past = len + 1 + int(v % 4);
    calls.push_back({cat("truncate(", seq, ", ", past, ") past its length ", len), std::to_string(past),
                     [&](Engine& e) { e.apply(calls::Truncate{seq, past}); }});
    const int token = v % 2 ? vocab + int(v % 7) : -1 - int(v % 3);
    calls.push_back({cat("a decode of token ", token, " (vocab ", vocab, ")"), std::to_string(token),
                     [&](Engine& e) { batch(e, {seq}, {token}); }});
    calls.push_back({cat("an open of sequence ", seq, ", which is open"), std::to_string(seq),
                     [&](Engine& e) { e.apply(calls::Open{seq}); }});
    const int beyond = config_.seqs + int(v % 3);
    calls.push_back({cat("an open of sequence ", beyond, " (", config_.seqs, " sequences)"), std::to_string(beyond),
                     [&](Engine& e) { e.apply(calls::Open{beyond}); }});
    const std::vector<int> free = free_seqs();
    const int closed = free.empty() ? -1 : free[v % free.size()];
    if (closed >= 0)
        calls.push_back({cat("a decode on sequence ", closed, ", which is closed"), std::to_string(closed),
                         [&](Engine& e) { batch(e, {closed}, {0}); }});
    if (engine_->capabilities() & KVWELD_CAP_COPY_SEQ)
        calls.push_back({cat("a copy of sequence ", seq, " onto itself"), std::to_string(seq),
                         [&](Engine& e) { e.apply(calls::Copy{seq, seq}); }});
    // One position more than the sequence has room for.
    const int over = r.capacity - len + 1;
    calls.push_back({cat("a decode of ", over, " tokens on sequence ", seq, " at length ", len, " (capacity ",
                         r.capacity, ")"),
                     std::to_string(r.capacity),
                     [&](Engine& e) { e.decode(std::vector<std::int32_t>(std::size_t(over), seq),
                                               std::vector<std::int32_t>(std::size_t(over), 0)); }});

    if (engine_->capabilities() & KVWELD_CAP_SHIFT)
        calls.push_back({cat("a shift of positions [", std::min(len, 1), ", ", past, ") of sequence ", seq, " at length ", len),
                         std::to_string(past), [&](Engine& e) { e.apply(calls::Shift{seq, std::min(len, 1), past, len}); }});
    if ((engine_->capabilities() & KVWELD_CAP_STATE) && len > 0) {
        // The sequence's own state, cut short: corrupt bytes must not half-load.
        const std::size_t size = engine_->state_save(seq).size();
        const std::size_t keep = size - 1 - std::size_t(v % std::min<std::size_t>(size, 64));
        calls.push_back({cat("a state load of ", keep, " bytes (the sequence's own state, cut short)"),
                         std::to_string(keep), [&, keep](Engine& e) {
                             std::vector<std::uint8_t> cut = e.state_save(seq);
                             cut.resize(std::min(keep, cut.size()));
                             e.state_load(seq, cut);
                         },
                         "", true});
    }
    if (engine_->capabilities() & KVWELD_CAP_LORA) {
        // Another width of a matrix the adapter adapts: ffn_down's input, or
        // (an MoE model's adapters leave ffn_down alone) attn_v's output.
        ModelConfig other = config_.model;
        const bool moe = other.moe();
        if (moe) other.n_kv_heads = other.n_kv_heads == other.n_heads ? other.n_heads / 2 : other.n_heads;
        else other.ffn_dim += 16 * (1 + int(v % 2));
        const int got = moe ? other.kv_dim() : other.ffn_dim, want = moe ? config_.model.kv_dim() : config_.model.ffn_dim;
        calls.push_back({cat("a LoRA adapter for a model with ", moe ? "kv_dim " : "ffn ", got, " (the model's is ", want,
                             ")"),
                         moe ? cat("kv_heads=", other.n_kv_heads) : std::to_string(got),
                         [&, other](Engine& e) {
                             const LoraUse use{LoraAdapter::random(other, 1, 1.0f, v), 1.0f};
                             e.apply(calls::SetLoras{std::span<const LoraUse>(&use, 1), nullptr, nullptr});
                         },
                         moe ? "attn_v" : "ffn_down"});
    }
    if (engine_->capabilities() & KVWELD_CAP_SAMPLERS) {
        const int k = std::min(kMaxTopK, vocab) + 1 + int(v % 3);
        calls.push_back({cat("a sampler chain of top_k ", k, " for sequence ", seq, " (vocab ", vocab, ")"),
                         std::to_string(k), [&, k](Engine& e) {
                             e.apply(calls::SetSampler{seq, SamplerSpec{k, std::uint32_t(v)}});
                         }});
    }
    if (engine_->capabilities() & KVWELD_CAP_CVEC) {
        const int end = config_.model.n_layers + int(v % 3);
        calls.push_back({cat("a control vector over layers 1..", end, " (the model has ", config_.model.n_layers, ")"),
                         std::to_string(end), [&, end](Engine& e) {
                             ControlVector cv = ControlVector::random(config_.model, v, 1, 1);
                             cv.end = end;
                             e.apply(calls::SetCvec{&cv, nullptr, nullptr});
                         }});
    }
    const Call& call = calls[op.call % calls.size()];
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
