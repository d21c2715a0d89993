#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/observers.hpp"
#include "sim/ops/invalid_call.hpp"
#include "targets/registry.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace kvweld::sim {

namespace {


// What a run may hold at once: per sequence the engine's KV (n_ctx
// positions) and the reference's shadow (the model's max_seq_len).
constexpr std::size_t kMaxSimKvBytes = std::size_t{4} << 30;

// Checked before anything is allocated: a trace is input.
const SimConfig& require_simulable(const SimConfig& c) {
    c.model.validate();
    require(c.seqs >= 1 && c.seqs <= 256, "sequences = ", c.seqs, ": must be in 1..256");
    require(c.n_ctx >= 1 && c.n_ctx <= c.model.max_seq_len, "n_ctx = ", c.n_ctx, ": must be in 1..max_seq_len = ",
            c.model.max_seq_len);
    KvGeometry engine_kv = KvGeometry::of(c.model);
    engine_kv.max_seq_len = c.n_ctx;
    const std::size_t per_seq = engine_kv.bytes() + KvGeometry::of(c.model).bytes() * 3 / 2;  // the shadow keeps raw keys too
    const std::size_t total = per_seq * std::size_t(c.seqs);
    require(total <= kMaxSimKvBytes, "this run could hold ", total, " bytes of KV (", c.seqs,
            " sequences x (engine + reference shadow) of ", per_seq, " bytes each): the limit is ", kMaxSimKvBytes,
            "; model ", c.model.describe());
    return c;
}

}  // namespace


Batch::Batch(std::vector<Pair> p) : pairs(std::move(p)) {
    for (const Pair& pair : pairs) {
        seqs.push_back(pair.seq);
        tokens.push_back(pair.token);
    }
    if (std::all_of(pairs.begin(), pairs.end(), [](const Pair& pair) { return pair.output; })) return;
    for (const Pair& pair : pairs) outputs.push_back(pair.output ? 1 : 0);
}

std::map<int, int> kept_lengths(const Batch& called, const Batch& kept) {
    std::map<int, int> lengths;
    for (const Pair& p : called.pairs) lengths.try_emplace(p.seq, p.pos);
    for (const Pair& p : kept.pairs) lengths[p.seq] = p.pos + 1;
    return lengths;
}

void Judge::record(Verdict v, Oracle o, std::string detail, std::string clause) {
    verdict_ = v;
    failure_ = Failure{op_index_, std::string(to_string(op_kind_)), o, std::move(detail), std::move(clause)};
}

void Judge::fail(Verdict v, Oracle o, std::string detail, std::string clause) {
    record(v, o, std::move(detail), std::move(clause));
    throw Stop{};
}

Simulator::Simulator(const SimConfig& config, bool checked)
    : config_(require_simulable(config)),
      model_(Model::random(config.model, config.weights_seed)),
      weights_seed_(config.weights_seed),
      engine_(open_engine(config_.engine.engine, config_.engine.faults, config_.setup(), model_)),
      requests_(std::size_t(config_.seqs)),
      kept_capacity_(std::size_t(config_.seqs), 0),
      world_{config_, model_, adapters_, requests_, model_generation_, weights_generation_, *engine_, samplers_} {
    require(engine_->vocab() == config_.model.vocab, "engine ", engine_->name(), " reports vocab ", engine_->vocab(),
            " for a model of vocab ", config_.model.vocab);
    // Ranks 1, 2 and 4; alpha / rank 1, 1 and 2.
    for (int i = 0; i < kLoraPool; ++i)
        lora_pool_.push_back(LoraAdapter::random(config_.model, 1 << i, float((1 << i) * (i == 2 ? 2 : 1)),
                                                 config_.weights_seed ^ (0x6c6f7261ULL + std::uint64_t(i))));
    open_observers(checked);
}

const std::vector<ReuseDiff>& Simulator::reuse_diffs() const {
    static const std::vector<ReuseDiff> none;
    return lockstep_ ? lockstep_->reuse_diffs() : none;
}

const std::string& Simulator::ended_early() const {
    static const std::string none;
    return lockstep_ ? lockstep_->ended_early() : none;
}

const std::map<std::string, ShapeStats>& Simulator::shapes() const { return accounting_->shapes(); }

void Simulator::end() {
    for (const auto& o : observers_) o->at_end();
}

std::vector<int> Simulator::free_seqs() const {
    std::vector<int> out;
    for (int s = 0; s < config_.seqs; ++s)
        if (!requests_[std::size_t(s)]) out.push_back(s);
    return out;
}

std::vector<int> Simulator::eligible(OpKind kind) const { return eligible_for(*this, kind); }

bool Simulator::apply(const Op& op, std::size_t op_index) {
    if (judge_.verdict() != Verdict::pass) return false;
    judge_.begin_op(op_index, op.kind());
    const std::vector<int> targets = eligible(op.kind());
    if (targets.empty()) {
        ++stats_.ops_skipped;
        return true;
    }
    const int seq = targets[op.pick() % targets.size()];
    for (const auto& o : observers_) o->before_op(op_index, op);
    try {
        // run() of a step or a steady phase says whether any sequence fed a token.
        const bool ran = std::visit(
            [&](const auto& args) {
                if constexpr (std::is_same_v<decltype(run(args, seq)), bool>) return run(args, seq);
                else return run(args, seq), true;
            },
            op.args);
        if (!ran) {
            ++stats_.ops_skipped;
            return true;
        }
        for (const auto& o : observers_) o->after_op(op.kind());
    } catch (const Judge::Stop&) {
        return false;
    } catch (const Lockstep::PeerError& e) {  // kvweld diff: engine B refused a valid op
        judge_.record(Verdict::engine_error, Oracle::peer, e.what());
        judge_.standing = nullptr;
        return false;
    } catch (const Error& e) {  // the engine refused a valid op, or its process died or hung (known by the crash's title)
        const auto* crashed = dynamic_cast<const targets::Crashed*>(&e);
        judge_.record(Verdict::engine_error, Oracle::engine,
                      config_.engine.peer ? cat("engine A (", config_.engine.engine, "): ", e.what()) : e.what(),
                      crashed ? crashed->clause() : judge_.standing ? judge_.standing : "");
        judge_.standing = nullptr;
        return false;
    }
    ++stats_.ops_run;
    ++stats_.ops_by_kind[std::size_t(op.kind())];
    return true;
}

void Simulator::make(const MemoryCall& call) {
    for (const auto& o : observers_) o->before_call(call);
    if (const auto* load = std::get_if<calls::Load>(&call)) {
        const auto it = std::find_if(saved_.begin(), saved_.end(), [&](const SavedState& s) { return s.id == load->id; });
        engine_->state_load(load->seq, it->bytes);
    } else {
        engine_->apply(call);
    }
    judge_.standing = nullptr;
}

bool Simulator::make_refusable(const MemoryCall& call) {
    const targets::PartialRemoval partial = partial_removal(config_.engine.engine, config_.engine.params, call);
    const std::string may = partial.may_refuse ? partial.may_refuse : "";
    const int named = partial.named;
    if (may.empty()) {
        make(call);
        return true;
    }
    for (const auto& o : observers_) o->before_call(call);
    try {
        engine_->apply(call);
    } catch (const targets::Crashed&) {
        throw;  // a process that died refused nothing
    } catch (const Error& e) {
        judge_.standing = nullptr;
        if (!names(e.what(), std::to_string(named)))
            judge_.fail(Verdict::engine_error, Oracle::engine,
                        cat("the engine refused a call its memory may refuse (", may, ") without naming ", named, ": ",
                            e.what()));
        // The twin is refused it too, and keeps what it held as the engine must.
        for (const auto& o : observers_) o->expect_refusal([&](Engine& other) { other.apply(call); }, cat("a call the engine refused (", e.what(), ")"));
        ++stats_.memory_refused;
        return false;
    }
    judge_.standing = nullptr;
    return true;
}

void Simulator::publish(const MemoryCall& call) {
    for (const auto& o : observers_)
        if (o->dropped_call != int(call.index())) o->on_call(call);
}

Simulator::Decoding Simulator::decode(std::vector<Pair> pairs) {
    Batch batch(std::move(pairs));
    const std::optional<std::uint32_t> armed = std::exchange(abort_armed_, std::nullopt);
    if (armed) batch.abort_after = int(*armed);
    for (const auto& o : observers_) o->before_decode(batch);
    if (armed) engine_->set_abort(batch.abort_after);
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> got;
    try {
        got = engine_->decode(batch.seqs, batch.tokens, batch.outputs);
    } catch (const targets::Aborted&) {
        if (!armed) throw Error("the engine reports a decode stopped by its abort callback, but none was armed");
        judge_.standing = nullptr;
        return {{}, aborted(batch)};
    } catch (const Error& e) {
        for (const auto& o : observers_) o->on_engine_refused(batch, e);
        throw;
    }
    judge_.standing = nullptr;
    decode_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++stats_.calls;
    std::vector<std::int32_t> shape = batch.seqs;
    for (std::size_t i = 0; i < batch.outputs.size(); ++i)
        if (!batch.outputs[i]) shape[i] = -1 - shape[i];
    stats_.same_shape_calls += shape == last_batch_ ? 1 : 0;
    last_batch_ = std::move(shape);
    stats_.batched_calls += std::any_of(batch.seqs.begin(), batch.seqs.end(), [&](int s) { return s != batch.seqs[0]; });
    Decoded decoded{batch, got, {}, {}, {}};
    if (engine_->capabilities() & KVWELD_CAP_SAMPLERS)
        for (int row = 0, rows = int(got.size() / std::size_t(config_.model.vocab)); row < rows; ++row)
            decoded.sampled.push_back(engine_->sampled(row));
    for (const auto& o : observers_) o->on_decode(decoded);
    for (const auto& o : observers_) o->after_decode(decoded);
    return {std::move(decoded.want), std::nullopt};
}

// What the engine kept of an aborted call goes to every observer as a
// decode without rows (the reference and a twin take the same tokens).
std::map<int, int> Simulator::aborted(const Batch& called) {
    const std::map<int, int> kept = kept_after_abort(called);
    std::vector<Pair> pairs;
    for (const Pair& p : called.pairs)
        if (p.pos < kept.at(p.seq)) pairs.push_back({p.seq, p.token, p.pos, false});
    ++stats_.calls;
    ++stats_.aborted_calls;
    stats_.aborted_fed += called.pairs.size();
    stats_.aborted_kept += pairs.size();
    last_batch_.clear();
    const Batch batch(std::move(pairs));
    const std::vector<float> none;
    Decoded decoded{batch, none, {}, {}, {}};
    for (const auto& o : observers_) o->on_aborted(called, decoded);
    for (const auto& o : observers_) o->after_decode(decoded);
    return kept;
}

std::map<int, int> Simulator::kept_after_abort(const Batch& called) {
    std::map<int, int> fed, kept;
    for (const Pair& p : called.pairs) ++fed[p.seq];
    for (int seq = 0; seq < config_.seqs; ++seq) {
        if (!requests_[std::size_t(seq)]) continue;
        const int held = int(requests_[std::size_t(seq)]->history.size()), more = fed.count(seq) ? fed[seq] : 0;
        const int now = engine_->seq_length(seq);
        // A sequence an earlier op left wrong (a known finding's
        // precondition, by the rule's account) carries that clause.
        const char* standing = judge_.standing_of ? judge_.standing_of(seq) : nullptr;
        if (now < held || now > held + more)
            judge_.fail(Verdict::engine_error, Oracle::engine,
                        cat("after a decode its abort callback stopped, sequence ", seq, " holds ", now,
                            " positions: it held ", held, " and the call fed it ", more,
                            " (llama.h: an aborted decode keeps a prefix of what it was given, the ubatches it "
                            "finished, and loses nothing held before)"),
                        standing ? standing : "");
        if (more) kept[seq] = now;
    }
    return kept;
}

void Simulator::requeue_all() {
    for (auto& r : requests_)
        if (r) requeue_from(*r, 0);
}

void Simulator::requeue_from(Request& r, std::size_t n) {
    if (n < r.history.size()) r.decoding = false;  // the queue now starts with tokens fed before
    r.parked.reset();  // chosen after what is fed again
    r.queue.insert(r.queue.begin(), r.history.begin() + long(n), r.history.end());
    r.history.resize(n);
}

void Simulator::rewrite_requeued(const ops::Rewrite& rewrite, Request& r, std::size_t n) const {
    if (!rewrite.on) return;
    Rng rng(rewrite.seed);
    const auto vocab = std::uint64_t(config_.model.vocab);
    for (std::size_t i = 0; i < n && i < r.queue.size() && vocab > 1; ++i)
        r.queue[i] = int((std::uint64_t(r.queue[i]) + 1 + rng.below(vocab - 1)) % vocab);
}

void Simulator::truncate_rejected(int seq, int n) {
    const int kept = spec_reject_fault_ ? n + 1 : n;  // the scheduler's fault keeps one rejected row
    const calls::Truncate call{seq, kept, true};
    if (make_refusable(call)) return publish(call);
    reprefill(seq);
}

// A rewind the memory refused: as a server does then, the sequence is
// emptied and what it accepted is fed again (llama-server's "forcing full
// prompt re-processing").
void Simulator::reprefill(int seq) {
    const calls::Clear call{seq};
    make(call);
    requeue_from(*requests_[std::size_t(seq)], 0);
    publish(call);
}

// After an aborted call, as a server goes on: a prefill keeps the prompt
// tokens the engine kept but the queue's last (whose row chooses the next
// token, and an aborted call returns none); a decoding sequence feeds its
// token and drafts again. Whatever the engine kept beyond that is cut back.
void Simulator::adopt_kept(int seq, bool prefill, int length, const std::vector<Pair>& pairs, std::size_t first) {
    Request& r = *requests_[std::size_t(seq)];
    const std::size_t held = r.history.size(), kept = std::size_t(length) - held;
    const std::size_t adopt = prefill ? std::min(kept, r.queue.size() - 1) : 0;
    for (std::size_t i = 0; i < adopt; ++i) r.history.push_back(pairs[first + i].token);
    r.queue.erase(r.queue.begin(), r.queue.begin() + long(adopt));
    if (kept == adopt) return;
    const calls::Truncate call{seq, int(held + adopt)};
    if (make_refusable(call)) return publish(call);
    reprefill(seq);
}

}  // namespace kvweld::sim
