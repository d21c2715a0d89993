#include "sim/serve/serve_sim.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"
#include "sim/choose.hpp"
#include "engines/registry.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <cmath>

namespace kvweld::sim {

namespace {

constexpr int kMaxCallTokens = 512;  // one decode call's tokens (llama.cpp's batch)

// A violation ends the run: thrown from deep in an op, caught in apply().
struct Stop {};

}  // namespace

void ServeStats::add(const ServeStats& o) {
    max_kv_error = std::max(max_kv_error, o.max_kv_error);
    ops_run += o.ops_run;
    ops_skipped += o.ops_skipped;
    requests += o.requests;
    calls += o.calls;
    rows += o.rows;
    batched_calls += o.batched_calls;
    drafts += o.drafts;
    rejected += o.rejected;
    refused += o.refused;
    plans += o.plans;
    reused += o.reused;
    must_reuse += o.must_reuse;
    must_reuse_shared += o.must_reuse_shared;
    may_reuse += o.may_reuse;
    builds += o.builds;
    rebinds += o.rebinds;
    max_logit_error = std::max(max_logit_error, o.max_logit_error);
}

std::string OracleReport::describe() const {
    auto one = [](const char* name, bool on, const std::string& why) {
        return cat("; ", name, on ? " on" : cat(" unavailable (", why, ")"));
    };
    return cat("  oracles: ", one("data", data, data_why_not).substr(2), one("accounting", accounting, accounting_why_not),
               accounting ? one("plan identity", plan_identity, plan_identity_why_not) : "",
               one("kv", kv, kv_why_not),
               one("weld and ledger", weld, weld_why_not), one("blocks", blocks, blocks_why_not));
}

void OracleReport::all_off(const std::string& why) {
    for (bool* on : {&data, &accounting, &plan_identity, &kv, &weld, &blocks}) *on = false;
    for (std::string* w : {&data_why_not, &accounting_why_not, &plan_identity_why_not, &kv_why_not, &weld_why_not,
                           &blocks_why_not})
        *w = why;
}

ServeSimulator::ServeSimulator(const ServeConfig& config, bool checked)
    : config_(config), model_(Model::random(config.model, config.weights_seed)), weights_seed_(config.weights_seed) {
    engine_ = open_engine(config_.engine.engine, config_.engine.faults, config_.setup(), model_);
    require(engine_->vocab() == config_.model.vocab, "engine ", engine_->name(), " reports vocab ", engine_->vocab(),
            " for a model of vocab ", config_.model.vocab);
    if (!(engine_->capabilities() & KVWELD_CAP_PLAN_COUNTERS))
        oracles_.accounting_why_not = cat("engine ", engine_->name(), " declares no plan counters");
    else
        rule_ = reuse_rule_for(engine_->name(), config_.setup(), oracles_.accounting_why_not);
    oracles_.accounting = rule_ != nullptr;
    oracles_.plan_identity = rule_ && (engine_->capabilities() & KVWELD_CAP_PLAN_SERIAL);
    if (!oracles_.plan_identity)
        oracles_.plan_identity_why_not = cat("engine ", engine_->name(), " reports no plan serial");
    read_counters();  // the first report is the baseline every later one must not fall below
    oracles_.kv = engine_->capabilities() & KVWELD_CAP_READ_KV;
    if (!oracles_.kv) oracles_.kv_why_not = cat("engine ", engine_->name(), " cannot read back its KV rows");
    oracles_.weld = engine_->capabilities() & KVWELD_CAP_STORAGE;
    if (!oracles_.weld)
        oracles_.weld_why_not = engine_->capabilities() & KVWELD_CAP_BLOCKS
                                    ? cat("engine ", engine_->name(), " has one pool, not storage per sequence: its "
                                                                      "weld is the blocks oracle's pool weld")
                                    : cat("engine ", engine_->name(), " reports no storage identity");
    requests_.resize(std::size_t(config_.seqs));
    if (!(engine_->capabilities() & KVWELD_CAP_BLOCKS))
        oracles_.blocks_why_not = cat("engine ", engine_->name(), " has no paged KV pool to report");
    else if (!(blocks_ = block_model_for(engine_->name(), config_.setup())))
        oracles_.blocks_why_not = cat("no block model for engine '", engine_->name(), "' (engines/registry.cpp)");
    else
        pool_storage_ = engine_->pool_info().storage;  // the first report is the pool's birth
    oracles_.blocks = blocks_.has_value();
    if (checked) return;
    oracles_.all_off("an unchecked run (--no-oracles)");
    rule_.reset();  // nothing judged; the block model stays, it paces the pool's growth
    last_counters_.reset();
}

std::vector<int> ServeSimulator::free_seqs() const {
    std::vector<int> out;
    for (int s = 0; s < config_.seqs; ++s)
        if (!requests_[std::size_t(s)]) out.push_back(s);
    return out;
}

std::vector<int> ServeSimulator::eligible(ServeOpKind kind) const {
    std::vector<int> out;
    if (kind == ServeOpKind::admit) return free_seqs();
    if (kind == ServeOpKind::reload)  // needs no sequence, only the capability
        return engine_->capabilities() & KVWELD_CAP_RELOAD ? std::vector<int>{0} : std::vector<int>{};
    if (kind == ServeOpKind::swap_layer && !(engine_->capabilities() & KVWELD_CAP_SWAP_LAYER)) return {};
    if (kind == ServeOpKind::reset)
        return engine_->capabilities() & KVWELD_CAP_POOL_OPS ? std::vector<int>{0} : std::vector<int>{};
    if (kind == ServeOpKind::compact || kind == ServeOpKind::grow) {  // the pool's, not a sequence's
        if (!(engine_->capabilities() & KVWELD_CAP_POOL_OPS)) return {};
        // A server grows its pool within a memory budget: here, four times
        // what every sequence full would take.
        const int full = config_.seqs * config_.n_ctx, budget = 4 * std::max(full, 1);
        // The pool's size as the block model has it (the simulator's own
        // account); without one, as the engine reports it.
        if (kind == ServeOpKind::grow && (engine_->capabilities() & KVWELD_CAP_BLOCKS)) {
            const kvweld_pool_info info = blocks_ ? kvweld_pool_info{} : engine_->pool_info();
            const std::int64_t positions = blocks_ ? std::int64_t(blocks_->n_blocks()) * blocks_->block_size()
                                                   : std::int64_t(info.n_blocks) * info.block_size;
            if (positions >= budget) return {};
        }
        return {0};
    }
    for (int s = 0; s < config_.seqs; ++s) {
        const auto& r = requests_[std::size_t(s)];
        if (!r) continue;
        const bool ok = kind == ServeOpKind::step        ? !r->done()
                        : kind == ServeOpKind::truncate  ? !r->history.empty()
                        : kind == ServeOpKind::preempt   ? !r->history.empty()
                        : kind == ServeOpKind::fork      ? !r->history.empty() && config_.seqs > 1
                                                         : true;  // retire, clear_all, swap_layer, invalid
        if (ok) out.push_back(s);
    }
    return out;
}

bool ServeSimulator::apply(const ServeOp& op, std::size_t op_index) {
    if (verdict_ != Verdict::pass) return false;
    op_index_ = op_index;
    op_kind_ = op.kind;
    const std::vector<int> targets = eligible(op.kind);
    if (targets.empty()) {
        ++stats_.ops_skipped;
        return true;
    }
    const int seq = targets[op.pick % targets.size()];
    try {
        switch (op.kind) {
            case ServeOpKind::admit: admit(op, seq); break;
            case ServeOpKind::step:
                if (!step(op)) {  // nobody asked for a token they could feed
                    ++stats_.ops_skipped;
                    return true;
                }
                break;
            case ServeOpKind::truncate:
                truncate(op, seq, int(op.length % (requests_[std::size_t(seq)]->history.size() + 1)));
                break;
            case ServeOpKind::preempt: preempt(op, seq); break;
            case ServeOpKind::fork: fork(seq, fork_destination(op, seq)); break;
            case ServeOpKind::reset: reset(); break;
            case ServeOpKind::invalid: invalid(op, seq); break;
            case ServeOpKind::retire: retire(seq); break;
            case ServeOpKind::clear_all: clear_all(); break;
            case ServeOpKind::reload: reload(op); break;
            case ServeOpKind::swap_layer: swap_layer(seq, op.layer % config_.model.n_layers); break;
            case ServeOpKind::compact:
            case ServeOpKind::grow: pool_op(op.kind); break;
        }
        check_blocks(false);
        if (op.kind != ServeOpKind::step) read_counters();  // a step read them after its call
    } catch (const Stop&) {
        return false;
    } catch (const Error& e) {  // the engine refused a valid op
        record(Verdict::engine_error, Oracle::engine, e.what());
        return false;
    }
    ++stats_.ops_run;
    return true;
}

void ServeSimulator::record(Verdict v, Oracle o, std::string detail) {
    verdict_ = v;
    failure_ = Failure{op_index_, std::string(to_string(op_kind_)), o, std::move(detail)};
}

void ServeSimulator::fail(Verdict v, Oracle o, std::string detail) {
    record(v, o, std::move(detail));
    throw Stop{};
}

void ServeSimulator::admit(const ServeOp& op, int seq) {
    for (int t : op.tokens)
        require(t < config_.model.vocab, "admit: prompt token ", t, " out of range: vocab is ", config_.model.vocab);
    engine_->open(seq);
    if (rule_) rule_->on_open(seq);
    ServeRequest r(config_.model);
    const std::size_t room = std::size_t(config_.n_ctx);
    r.queue.assign(op.tokens.begin(), op.tokens.begin() + long(std::min(op.tokens.size(), room)));
    r.max_new = op.max_new;
    requests_[std::size_t(seq)].emplace(std::move(r));
    ledger_after(ServeOpKind::admit, seq);
    ++stats_.requests;
}

void ServeSimulator::requeue_all(ServeOpKind kind) {
    for (int s = 0; s < config_.seqs; ++s)
        if (auto& r = requests_[std::size_t(s)]) {
            requeue_from(*r, 0);
            ledger_after(kind, s);
        }
}

void ServeSimulator::requeue_from(ServeRequest& r, std::size_t n) {
    if (n < r.history.size()) r.decoding = false;  // the queue now starts with tokens fed before
    r.queue.insert(r.queue.begin(), r.history.begin() + long(n), r.history.end());
    r.history.resize(n);
}

void ServeSimulator::rewrite_requeued(const ServeOp& op, ServeRequest& r, std::size_t n) const {
    if (!op.rewrite) return;
    Rng rng(op.seed);
    const auto vocab = std::uint64_t(config_.model.vocab);
    for (std::size_t i = 0; i < n && i < r.queue.size() && vocab > 1; ++i)
        r.queue[i] = int((std::uint64_t(r.queue[i]) + 1 + rng.below(vocab - 1)) % vocab);
}

void ServeSimulator::truncate(const ServeOp& op, int seq, int n) {
    engine_->truncate(seq, n);
    if (blocks_) blocks_->truncate(seq, n);
    if (rule_) rule_->on_truncate(seq, n);
    ServeRequest& r = *requests_[std::size_t(seq)];
    const std::size_t dropped = r.history.size() - std::size_t(n);
    requeue_from(r, std::size_t(n));
    rewrite_requeued(op, r, dropped);
    ledger_after(ServeOpKind::truncate, seq);
}

void ServeSimulator::preempt(const ServeOp& op, int seq) {
    engine_->clear(seq);
    if (blocks_) blocks_->clear(seq);
    if (rule_) rule_->on_clear(seq);
    ServeRequest& r = *requests_[std::size_t(seq)];
    const std::size_t dropped = r.history.size();
    requeue_from(r, 0);
    rewrite_requeued(op, r, dropped);
    ledger_after(ServeOpKind::preempt, seq);
}

// A free sequence, or with onto_open (or none free) another open one,
// whose positions the copy replaces.
int ServeSimulator::fork_destination(const ServeOp& op, int src) const {
    std::vector<int> open;
    for (int s = 0; s < config_.seqs; ++s)
        if (s != src && requests_[std::size_t(s)]) open.push_back(s);
    const std::vector<int> free = free_seqs();
    const std::vector<int>& to = (op.onto_open && !open.empty()) || free.empty() ? open : free;
    return to[op.pick2 % to.size()];
}

void ServeSimulator::fork(int src, int dst) {
    if (!requests_[std::size_t(dst)]) {
        engine_->open(dst);
        if (rule_) rule_->on_open(dst);
    }
    engine_->copy(src, dst);
    if (blocks_) blocks_->fork(src, dst);
    if (rule_) rule_->on_copy(src, dst);
    requests_[std::size_t(dst)] = requests_[std::size_t(src)];
    ledger_after(ServeOpKind::fork, dst);
    ++stats_.requests;
}

void ServeSimulator::retire(int seq) {
    engine_->close(seq);
    if (blocks_) blocks_->close(seq);
    if (rule_) rule_->on_close(seq);
    requests_[std::size_t(seq)].reset();
}

void ServeSimulator::clear_all() {
    engine_->clear_all();
    if (blocks_) blocks_->clear_all();
    if (rule_) rule_->on_clear_all();
    requeue_all(ServeOpKind::clear_all);
}

// The reference takes the same weights the engine is given; every sequence
// starts over (the ABI's reload empties them).
void ServeSimulator::reload(const ServeOp& op) {
    if (!op.same_weights) weights_seed_ = op.seed;
    Model next = Model::random(config_.model, weights_seed_);
    engine_->reload(ModelFile(next, engine_->model_format()).path());
    model_ = std::move(next);
    if (blocks_) blocks_->clear_all();
    if (rule_) rule_->on_reload();
    requeue_all(ServeOpKind::reload);
}

void ServeSimulator::swap_layer(int seq, int layer) {
    engine_->swap_layer(seq, layer);
    if (rule_) rule_->on_swap_layer(seq, layer);
    ledger_after(ServeOpKind::swap_layer, seq, layer);
}

void ServeSimulator::reset() {
    engine_->pool_op(KVWELD_POOL_RESET);
    if (blocks_) blocks_->reset();
    if (rule_) rule_->on_pool_op(KVWELD_POOL_RESET);
    requeue_all(ServeOpKind::reset);
}

void ServeSimulator::pool_op(ServeOpKind kind) {
    const int op = kind == ServeOpKind::grow ? KVWELD_POOL_GROW : KVWELD_POOL_COMPACT;
    engine_->pool_op(op);
    if (blocks_ && op == KVWELD_POOL_GROW) blocks_->grow();
    if (rule_) rule_->on_pool_op(op);
}

// One batched step: each sequence asked for tokens feeds a prefill chunk
// or its pending token and drafts; after the call, rejected drafts are
// truncated away and each sequence whose queue ran out gets its next token.
bool ServeSimulator::step(const ServeOp& op) {
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
        const int room = config_.n_ctx - int(r ? r->history.size() : 0);
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
            for (int i = 0; i < k; ++i) pairs.push_back({s, r->queue[std::size_t(i)], pos + i});
        }
        part.count = std::size_t(k);
        parts.push_back(part);
    }
    if (pairs.empty()) return false;
    const std::vector<std::vector<float>> want = checked_decode(pairs);
    for (const Part& part : parts) {
        ServeRequest& r = *requests_[std::size_t(part.seq)];
        const std::size_t kept = part.accepted < 0 ? part.count : std::size_t(1 + part.accepted);
        for (std::size_t i = 0; i < kept; ++i) r.history.push_back(pairs[part.first + i].token);
        r.queue.erase(r.queue.begin(), r.queue.begin() + long(std::min(r.queue.size(), part.accepted < 0 ? part.count : 1)));
        if (kept < part.count) {  // speculative rejects: rewind to what was accepted
            engine_->truncate(part.seq, int(r.history.size()));
            if (blocks_) blocks_->truncate(part.seq, int(r.history.size()));
            if (rule_) rule_->on_truncate(part.seq, int(r.history.size()));
        }
        r.generated += part.accepted > 0 ? part.accepted : 0;
        if (!r.queue.empty()) continue;
        r.decoding = false;
        if (r.generated >= r.max_new || int(r.history.size()) >= config_.n_ctx) continue;  // done
        r.queue.push_back(choose_token(want[part.first + kept - 1], config_.sampled, rng));
        r.decoding = true;
        ++r.generated;
    }
    return true;
}

std::vector<std::vector<float>> ServeSimulator::checked_decode(const std::vector<Pair>& pairs) {
    std::vector<std::int32_t> seqs, tokens;
    for (const Pair& p : pairs) {
        seqs.push_back(p.seq);
        tokens.push_back(p.token);
    }
    const auto before = read_counters();
    const auto start = std::chrono::steady_clock::now();
    const std::vector<float> got = engine_->decode(seqs, tokens);
    decode_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (blocks_)
        for (int s : seqs) blocks_->append(s);
    ++stats_.calls;
    stats_.batched_calls += std::any_of(seqs.begin(), seqs.end(), [&](int s) { return s != seqs[0]; }) ? 1 : 0;
    // Oracles one file each (oracle_*.cpp): data, then weld and kv, then the
    // blocks, then accounting.
    std::vector<std::vector<float>> want = check_data(pairs, got);
    check_weld(pairs);
    check_kv(pairs);
    check_blocks(true);
    check_accounting(pairs, before);
    return want;
}

}  // namespace kvweld::sim
