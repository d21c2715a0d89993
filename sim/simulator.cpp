#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/choose.hpp"
#include "sim/observers.hpp"
#include "targets/registry.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

namespace kvweld::sim {

namespace {

constexpr int kMaxCallTokens = 512;  // one decode call's tokens (llama.cpp's batch)
constexpr std::uint64_t kParkStream = 0x7061726b65642d74ULL;

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
    } catch (const Error& e) {  // the engine refused a valid op
        judge_.record(Verdict::engine_error, Oracle::engine,
                      config_.engine.peer ? cat("engine A (", config_.engine.engine, "): ", e.what()) : e.what(),
                      judge_.standing ? judge_.standing : "");
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

void Simulator::publish(const MemoryCall& call) {
    for (const auto& o : observers_) o->on_call(call);
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

void Simulator::run(const ops::Truncate& op, int seq) {
    Request& r = *requests_[std::size_t(seq)];
    const int n = int(op.length % (r.history.size() + 1));
    const calls::Truncate call{seq, n};
    make(call);
    const std::size_t dropped = r.history.size() - std::size_t(n);
    requeue_from(r, std::size_t(n));
    rewrite_requeued(op.rewrite, r, dropped);
    publish(call);
}

void Simulator::run(const ops::Preempt& op, int seq) {
    const calls::Clear call{seq};
    make(call);
    Request& r = *requests_[std::size_t(seq)];
    const std::size_t dropped = r.history.size();
    requeue_from(r, 0);
    rewrite_requeued(op.rewrite, r, dropped);
    publish(call);
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
    requests_[std::size_t(dst)] = requests_[std::size_t(src)];
    publish(call);
    ++stats_.requests;
}

void Simulator::run(const ops::Retire&, int seq) {
    const calls::Close call{seq};
    make(call);
    kept_capacity_[std::size_t(seq)] = requests_[std::size_t(seq)]->capacity;  // the slot keeps its storage
    requests_[std::size_t(seq)].reset();
    publish(call);
}

// White box: the request and its storage move to a free slot, whose held
// plan was built on other storage (or none).
void Simulator::run(const ops::Migrate& op, int from) {
    const std::vector<int> free = free_seqs();
    const int to = free[op.to % free.size()];
    const calls::Migrate call{from, to};
    make(call);
    requests_[std::size_t(to)] = std::move(requests_[std::size_t(from)]);
    requests_[std::size_t(from)].reset();
    kept_capacity_[std::size_t(to)] = kept_capacity_[std::size_t(from)];
    kept_capacity_[std::size_t(from)] = 0;
    publish(call);
}

void Simulator::run(const ops::Lora& op, int) {
    std::vector<LoraUse> uses;
    for (std::size_t i = 0; i < op.adapters.size() && i < op.scales.size(); ++i)
        uses.push_back({lora_pool_[std::size_t(op.adapters[i]) % lora_pool_.size()], op.scales[i]});
    make(calls::SetLoras{uses, nullptr, nullptr});
    const Adapters before = adapters_;
    adapters_.set_loras(config_.model, uses);
    publish(calls::SetLoras{uses, &before, &adapters_});
}

void Simulator::run(const ops::Cvec& op, int) {
    std::optional<ControlVector> cvec;
    if (!op.clear) {
        const int layers = config_.model.n_layers, start = op.start % layers;
        cvec = ControlVector::random(config_.model, op.seed, start, std::max(start, op.end % layers));
    }
    const ControlVector* given = cvec ? &*cvec : nullptr;
    make(calls::SetCvec{given, nullptr, nullptr});
    const Adapters before = adapters_;
    adapters_.set_cvec(config_.model, cvec);
    publish(calls::SetCvec{given, &before, &adapters_});
}

void Simulator::run(const ops::Warmup& op, int) {
    make(calls::SetWarmup{op.on, nullptr, nullptr});
    const Adapters before = adapters_;
    adapters_.set_warmup(op.on);
    publish(calls::SetWarmup{op.on, &before, &adapters_});
}

void Simulator::truncate_rejected(int seq, int n) {
    const int kept = spec_reject_fault_ ? n + 1 : n;  // the scheduler's fault keeps one rejected row
    const calls::Truncate call{seq, kept, true};
    make(call);
    publish(call);
}

void Simulator::run(const ops::ClearAll&, int) {
    make(calls::ClearAll{});
    requeue_all();
    publish(calls::ClearAll{});
}

// The reference takes the same weights the engine is given; every sequence
// starts over (the ABI's reload empties them).
void Simulator::run(const ops::Reload& op, int) {
    const std::uint64_t seed = op.same_weights ? weights_seed_ : op.seed;
    Model next = Model::random(config_.model, seed);
    make(calls::Reload{&next});
    model_ = std::move(next);
    weights_generation_ += seed != weights_seed_;
    weights_seed_ = seed;
    ++model_generation_;
    requeue_all();
    publish(calls::Reload{&model_});
}

void Simulator::run(const ops::SwapLayer& op, int seq) {
    const calls::SwapLayer call{seq, op.layer % config_.model.n_layers};
    make(call);
    publish(call);
}

void Simulator::run(const ops::Reset&, int) {
    make(calls::PoolOp{KVWELD_POOL_RESET});
    requeue_all();
    publish(calls::PoolOp{KVWELD_POOL_RESET});
}

void Simulator::run(const ops::Live& op, int) {
    const calls::SetLive call{op.key, op.value};
    make(call);
    publish(call);
}

void Simulator::run(const ops::Abort& op, int) { abort_armed_ = op.after; }

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
    make(call);
    publish(call);
}

// In place only where the id holds a chain (the simulator's own account).
void Simulator::run(const ops::SetSampler& op, int) {
    const int seq = int(op.seq % std::uint32_t(config_.seqs));
    const bool held = samplers_.count(seq) > 0;
    const calls::SetSampler call{seq, op.top_k < 0 ? std::nullopt : std::optional<SamplerSpec>({op.top_k, op.seed}),
                                 op.in_place && held && op.top_k >= 0};
    make(call);
    if (call.spec) samplers_[seq] = *call.spec;
    else samplers_.erase(seq);
    publish(call);
}

void Simulator::run(const ops::Compact&, int) {
    make(calls::PoolOp{KVWELD_POOL_COMPACT});
    publish(calls::PoolOp{KVWELD_POOL_COMPACT});
}

void Simulator::run(const ops::Grow&, int) {
    make(calls::PoolOp{KVWELD_POOL_GROW});
    publish(calls::PoolOp{KVWELD_POOL_GROW});
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

}  // namespace kvweld::sim
