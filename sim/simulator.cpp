#include "sim/simulator.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/choose.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <cmath>
#include <limits>

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

void RunStats::add(const RunStats& o) {
    max_kv_error = std::max(max_kv_error, o.max_kv_error);
    ops_run += o.ops_run;
    ops_skipped += o.ops_skipped;
    for (int k = 0; k < kOpKinds; ++k) ops_by_kind[std::size_t(k)] += o.ops_by_kind[std::size_t(k)];
    requests += o.requests;
    calls += o.calls;
    rows += o.rows;
    reference_rows += o.reference_rows;
    batched_calls += o.batched_calls;
    same_shape_calls += o.same_shape_calls;
    drafts += o.drafts;
    rejected += o.rejected;
    refused += o.refused;
    twin_rows += o.twin_rows;
    twin_within_tolerance += o.twin_within_tolerance;
    plans += o.plans;
    reused += o.reused;
    must_reuse += o.must_reuse;
    must_reuse_shared += o.must_reuse_shared;
    may_reuse += o.may_reuse;
    builds += o.builds;
    rebinds += o.rebinds;
    peer_reused += o.peer_reused;
    peer_builds += o.peer_builds;
    peer_rebinds += o.peer_rebinds;
    peer_rows += o.peer_rows;
    reuse_more += o.reuse_more;
    reuse_fewer += o.reuse_fewer;
    prepared_otherwise += o.prepared_otherwise;
    max_peer_error = std::max(max_peer_error, o.max_peer_error);
    change_decodes += o.change_decodes;
    data_blind += o.data_blind;
    independent_blind += o.independent_blind;
    blind_same_weights_reload += o.blind_same_weights_reload;
    max_logit_error = std::max(max_logit_error, o.max_logit_error);
}

std::string OracleReport::describe() const {
    auto one = [](const char* name, bool on, const std::string& why) {
        return cat("; ", name, on ? " on" : cat(" unavailable (", why, ")"));
    };
    return cat("  oracles: ", one("data", data, data_why_not).substr(2), one("accounting", accounting, accounting_why_not),
               accounting ? one("plan identity", plan_identity, plan_identity_why_not) : "",
               one("kv", kv, kv_why_not),
               one("weld and ledger", weld, weld_why_not), one("blocks", blocks, blocks_why_not),
               one("white box (pinned storage, poisoned dead rows, blindness counts, capacities, migrate, adapters)", white_box,
                   white_box_why_not),
               one("twin", twin, twin_why_not),
               peer ? cat("; peer on", peer_reuse_why_not.empty() ? "" : cat(" (rows only: ", peer_reuse_why_not, ")"))
                    : "");
}

void OracleReport::all_off(const std::string& why) {
    for (bool* on : {&data, &accounting, &plan_identity, &kv, &weld, &blocks, &white_box, &twin}) *on = false;
    for (std::string* w : {&data_why_not, &accounting_why_not, &plan_identity_why_not, &kv_why_not, &weld_why_not,
                           &blocks_why_not, &white_box_why_not, &twin_why_not})
        *w = why;
}

Simulator::Simulator(const SimConfig& config, bool checked)
    : config_(require_simulable(config)),
      model_(Model::random(config.model, config.weights_seed)),
      weights_seed_(config.weights_seed) {
    engine_ = open_engine(config_.engine.engine, config_.engine.faults, config_.setup(), model_);
    require(engine_->vocab() == config_.model.vocab, "engine ", engine_->name(), " reports vocab ", engine_->vocab(),
            " for a model of vocab ", config_.model.vocab);
    counters_ = engine_->capabilities() & KVWELD_CAP_PLAN_COUNTERS;
    if (!counters_)
        oracles_.accounting_why_not = cat("engine ", engine_->name(), " declares no plan counters");
    else
        rule_ = reuse_rule_for(engine_->name(), engine_build(config_.engine.engine), config_.setup(),
                               oracles_.accounting_why_not);
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
        oracles_.blocks_why_not = cat("no block model for engine '", engine_->name(), "' (targets/registry.cpp)");
    else
        pool_storage_ = engine_->pool_info().storage;  // the first report is the pool's birth
    oracles_.blocks = blocks_.has_value();
    ledger_.resize(std::size_t(config_.seqs));
    plans_.resize(std::size_t(config_.seqs));
    white_box_ = engine_->white_box();
    oracles_.white_box = white_box_ != nullptr;
    // Settings the reference cannot follow: the twin judges every row.
    oracles_.data_why_not = reference_blind(config_.engine.engine, config_.engine.params);
    oracles_.data = oracles_.data_why_not.empty();
    // Ranks 1, 2 and 4; alpha / rank 1, 1 and 2.
    for (int i = 0; i < kLoraPool; ++i)
        lora_pool_.push_back(LoraAdapter::random(config_.model, 1 << i, float((1 << i) * (i == 2 ? 2 : 1)),
                                                 config_.weights_seed ^ (0x6c6f7261ULL + std::uint64_t(i))));
    open_twin();
    if (!white_box_)
        oracles_.white_box_why_not = cat("engine ", engine_->name(), " runs behind the plugin ABI");
    for (const std::string& f : abi::split_list(config_.engine.faults.c_str()))
        spec_reject_fault_ = spec_reject_fault_ || (white_box_ && f == "spec_reject_off_by_one");
    if (!oracles_.data && !second_)
        oracles_.data_why_not += cat("; the twin, the data oracle here, is unavailable too: ", oracles_.twin_why_not);
    if (config_.engine.peer) open_peer();
    if (checked) return;
    oracles_.all_off("an unchecked run (--no-oracles)");
    second_.reset();
    rule_.reset();  // nothing judged; the block model stays, it paces the pool's growth
    counters_ = false;
    last_counters_.reset();
}

std::vector<int> Simulator::free_seqs() const {
    std::vector<int> out;
    for (int s = 0; s < config_.seqs; ++s)
        if (!requests_[std::size_t(s)]) out.push_back(s);
    return out;
}

std::vector<int> Simulator::eligible(OpKind kind) const { return eligible_for(*this, kind); }

bool Simulator::apply(const Op& op, std::size_t op_index) {
    if (verdict_ != Verdict::pass) return false;
    op_index_ = op_index;
    op_kind_ = op.kind();
    const std::vector<int> targets = eligible(op.kind());
    if (targets.empty()) {
        ++stats_.ops_skipped;
        return true;
    }
    const int seq = targets[op.pick() % targets.size()];
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
        check_blocks(false);
        if (op.kind() != OpKind::step) read_counters();  // a step read them after its call
    } catch (const Stop&) {
        return false;
    } catch (const PeerError& e) {  // kvweld diff: engine B refused a valid op
        record(Verdict::engine_error, Oracle::peer, e.what());
        standing_ = nullptr;
        return false;
    } catch (const Error& e) {  // the engine refused a valid op
        record(Verdict::engine_error, Oracle::engine, peer_ ? cat("engine A (", config_.engine.engine, "): ", e.what()) : e.what(),
               standing_ ? standing_ : "");
        standing_ = nullptr;
        return false;
    }
    ++stats_.ops_run;
    ++stats_.ops_by_kind[std::size_t(op.kind())];
    recent_ops_.emplace_back(op_index, op.kind());
    if (recent_ops_.size() > 3) recent_ops_.erase(recent_ops_.begin());
    return true;
}

void Simulator::record(Verdict v, Oracle o, std::string detail, std::string clause) {
    verdict_ = v;
    failure_ = Failure{op_index_, std::string(to_string(op_kind_)), o, std::move(detail), std::move(clause)};
}

void Simulator::fail(Verdict v, Oracle o, std::string detail, std::string clause) {
    record(v, o, std::move(detail), std::move(clause));
    throw Stop{};
}

void Simulator::run(const ops::Admit& op, int seq) {
    for (int t : op.prompt)
        require(t < config_.model.vocab, "admit: prompt token ", t, " out of range: vocab is ", config_.model.vocab);
    Request r(config_.model);
    r.capacity = config_.n_ctx;
    bool recycle = false;
    if (white_box_) {  // a capacity of the seed's, or the storage the slot kept
        SlotLedger& slot = ledger_[std::size_t(seq)];
        recycle = op.recycle && slot.kept_capacity > 0;
        if (recycle) r.capacity = slot.kept_capacity;
        else if (!config_.capacities.empty()) r.capacity = config_.capacities[op.capacity % config_.capacities.size()];
        both([&](Engine& e) { e.white_box()->open_sized(seq, r.capacity, recycle); });
        if (rule_) rule_->on_open_sized(seq, r.capacity, recycle);
        if (recycle) poison(seq, 0, r.capacity);  // every row is dead again
    } else {
        both([&](Engine& e) { e.open(seq); });
        if (rule_) rule_->on_open(seq);
    }
    const std::size_t room = std::size_t(r.capacity);
    r.queue.assign(op.prompt.begin(), op.prompt.begin() + long(std::min(op.prompt.size(), room)));
    r.max_new = op.max_new;
    requests_[std::size_t(seq)].emplace(std::move(r));
    ledger_after(recycle ? SeqOp::recycle : SeqOp::open, seq);
    ++stats_.requests;
}

void Simulator::requeue_all(SeqOp op) {
    for (int s = 0; s < config_.seqs; ++s)
        if (auto& r = requests_[std::size_t(s)]) {
            requeue_from(*r, 0);
            ledger_after(op, s);
        }
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
    const int n = int(op.length % (requests_[std::size_t(seq)]->history.size() + 1));
    both([&](Engine& e) { e.truncate(seq, n); });
    if (blocks_) blocks_->truncate(seq, n);
    if (rule_) rule_->on_truncate(seq, n);
    Request& r = *requests_[std::size_t(seq)];
    poison(seq, n, int(r.history.size()) + 1);  // +1: a row the spec_reject fault may have kept
    const std::size_t dropped = r.history.size() - std::size_t(n);
    requeue_from(r, std::size_t(n));
    rewrite_requeued(op.rewrite, r, dropped);
    ledger_after(SeqOp::truncate, seq);
}

void Simulator::run(const ops::Preempt& op, int seq) {
    both([&](Engine& e) { e.clear(seq); });
    if (blocks_) blocks_->clear(seq);
    if (rule_) rule_->on_clear(seq);
    Request& r = *requests_[std::size_t(seq)];
    const std::size_t dropped = r.history.size();
    requeue_from(r, 0);
    rewrite_requeued(op.rewrite, r, dropped);
    ledger_after(SeqOp::clear, seq);
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
    if (!requests_[std::size_t(dst)]) {
        both([&](Engine& e) { e.open(dst); });
        if (rule_) rule_->on_open(dst);
    }
    both([&](Engine& e) { e.copy(src, dst); });
    if (blocks_) blocks_->fork(src, dst);
    if (rule_) rule_->on_copy(src, dst);
    requests_[std::size_t(dst)] = requests_[std::size_t(src)];
    ledger_after(SeqOp::copy_into, dst);
    ++stats_.requests;
}

void Simulator::run(const ops::Retire&, int seq) {
    both([&](Engine& e) { e.close(seq); });
    if (blocks_) blocks_->close(seq);
    if (rule_) rule_->on_close(seq);
    ledger_[std::size_t(seq)].kept_capacity = requests_[std::size_t(seq)]->capacity;  // the slot keeps its storage
    requests_[std::size_t(seq)].reset();
}

// White box: the request and its storage move to a free slot, whose held
// plan was built on other storage (or none); the ledger moves with them.
void Simulator::run(const ops::Migrate& op, int from) {
    const std::vector<int> free = free_seqs();
    const int to = free[op.to % free.size()];
    both([&](Engine& e) { e.white_box()->migrate(from, to); });
    if (rule_) rule_->on_migrate(from, to);
    requests_[std::size_t(to)] = std::move(requests_[std::size_t(from)]);
    requests_[std::size_t(from)].reset();
    ledger_[std::size_t(to)] = std::move(ledger_[std::size_t(from)]);
    ledger_[std::size_t(from)] = SlotLedger{};
    ledger_after(SeqOp::migrate, to);
}

// The rule is told what changed as the simulator's own account has it
// (which adapters, in order, at which scales; which vector), not as the
// engine reports.
void Simulator::run(const ops::Lora& op, int) {
    std::vector<LoraUse> uses;
    for (std::size_t i = 0; i < op.adapters.size() && i < op.scales.size(); ++i)
        uses.push_back({lora_pool_[std::size_t(op.adapters[i]) % lora_pool_.size()], op.scales[i]});
    both([&](Engine& e) { e.set_loras(uses); });
    const Adapters before = adapters_;
    adapters_.set_loras(config_.model, std::move(uses));
    if (rule_) rule_->on_adapters(before, adapters_);
}

void Simulator::run(const ops::Cvec& op, int) {
    std::optional<ControlVector> cvec;
    if (!op.clear) {
        const int layers = config_.model.n_layers, start = op.start % layers;
        cvec = ControlVector::random(config_.model, op.seed, start, std::max(start, op.end % layers));
    }
    both([&](Engine& e) { e.set_cvec(cvec ? &*cvec : nullptr); });
    const Adapters before = adapters_;
    adapters_.set_cvec(config_.model, std::move(cvec));
    if (rule_) rule_->on_adapters(before, adapters_);
}

void Simulator::run(const ops::Warmup& op, int) {
    both([&](Engine& e) { e.set_warmup(op.on); });
    const Adapters before = adapters_;
    adapters_.set_warmup(op.on);
    // A dense model routes nothing: no plan depends on warmup there.
    if (rule_ && config_.model.moe()) rule_->on_adapters(before, adapters_);
}

void Simulator::poison(int seq, int from, int to) {
    if (!white_box_) return;
    for (const KvLayer& layer : ledger_[std::size_t(seq)].pinned) {
        const int end = std::min(to, layer->max_seq_len());
        if (from >= end) continue;
        for (int pos = from; pos < end; ++pos) {
            std::fill_n(layer->key_row(pos), layer->kv_dim(), std::numeric_limits<float>::quiet_NaN());
            std::fill_n(layer->value_row(pos), layer->kv_dim(), std::numeric_limits<float>::quiet_NaN());
        }
        if (layer->device()) layer->device()->upload(*layer, from, end - from);
    }
}

void Simulator::truncate_rejected(int seq, int n) {
    const int kept = spec_reject_fault_ ? n + 1 : n;  // the scheduler's fault keeps one rejected row
    both([&](Engine& e) { e.truncate(seq, kept); });
    if (blocks_) blocks_->truncate(seq, kept);
    if (rule_) rule_->on_truncate(seq, kept);
    poison(seq, kept, requests_[std::size_t(seq)]->capacity);
}

void Simulator::run(const ops::ClearAll&, int) {
    both([&](Engine& e) { e.clear_all(); });
    if (blocks_) blocks_->clear_all();
    if (rule_) rule_->on_clear_all();
    requeue_all(SeqOp::clear);
}

// The reference takes the same weights the engine is given; every sequence
// starts over (the ABI's reload empties them).
void Simulator::run(const ops::Reload& op, int) {
    const std::uint64_t seed = op.same_weights ? weights_seed_ : op.seed;
    Model next = Model::random(config_.model, seed);
    both([&](Engine& e) { e.reload(next); });
    model_ = std::move(next);
    weights_generation_ += seed != weights_seed_;
    weights_seed_ = seed;
    ++model_generation_;
    if (blocks_) blocks_->clear_all();
    if (rule_) rule_->on_reload();
    requeue_all(SeqOp::reload);
}

void Simulator::run(const ops::SwapLayer& op, int seq) {
    const int layer = op.layer % config_.model.n_layers;
    both([&](Engine& e) { e.swap_layer(seq, layer); });
    if (rule_) rule_->on_swap_layer(seq, layer);
    ledger_after(SeqOp::swap_layer, seq, layer);
}

void Simulator::run(const ops::Reset&, int) {
    both([&](Engine& e) { e.pool_op(KVWELD_POOL_RESET); });
    if (blocks_) blocks_->reset();
    if (rule_) rule_->on_pool_op(KVWELD_POOL_RESET);
    requeue_all(SeqOp::clear);
}

void Simulator::run(const ops::Compact&, int) {
    both([&](Engine& e) { e.pool_op(KVWELD_POOL_COMPACT); });
    if (rule_) rule_->on_pool_op(KVWELD_POOL_COMPACT);
}

void Simulator::run(const ops::Grow&, int) {
    both([&](Engine& e) { e.pool_op(KVWELD_POOL_GROW); });
    if (blocks_) blocks_->grow();
    if (rule_) rule_->on_pool_op(KVWELD_POOL_GROW);
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
    const std::vector<std::vector<float>> want = checked_decode(pairs);
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

std::vector<std::uint8_t> Simulator::output_flags(const std::vector<Pair>& pairs) {
    if (std::all_of(pairs.begin(), pairs.end(), [](const Pair& p) { return p.output; })) return {};
    std::vector<std::uint8_t> out;
    for (const Pair& p : pairs) out.push_back(p.output ? 1 : 0);
    return out;
}

std::vector<std::vector<float>> Simulator::checked_decode(const std::vector<Pair>& pairs) {
    std::vector<std::int32_t> seqs, tokens;
    for (const Pair& p : pairs) {
        seqs.push_back(p.seq);
        tokens.push_back(p.token);
    }
    const std::vector<std::uint8_t> outputs = output_flags(pairs);
    const auto before = read_counters();
    // White box: what a plan that missed a change would leave unseen,
    // measured before the decode (each sequence's first row in the call).
    std::vector<std::pair<std::size_t, Blindness>> blind;
    if (white_box_ && oracles_.data)
        for (std::size_t i = 0; i < pairs.size(); ++i)
            if (i == 0 || std::none_of(pairs.begin(), pairs.begin() + long(i), [&](const Pair& p) { return p.seq == pairs[i].seq; }))
                blind.emplace_back(i, blindness_before(pairs[i].seq, pairs[i].pos));
    standing_ = rule_ ? rule_->standing_clause(seqs) : nullptr;  // what a refusal of this call carries
    const auto start = std::chrono::steady_clock::now();
    const std::vector<float> got = peer_ ? decode_or_both_refuse(seqs, tokens, outputs) : engine_->decode(seqs, tokens, outputs);
    standing_ = nullptr;
    decode_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (blocks_)
        for (int s : seqs) blocks_->append(s);
    ++stats_.calls;
    std::vector<std::int32_t> batch = seqs;
    for (std::size_t i = 0; i < outputs.size(); ++i)
        if (!outputs[i]) batch[i] = -1 - batch[i];
    stats_.same_shape_calls += batch == last_batch_ ? 1 : 0;
    last_batch_ = std::move(batch);
    stats_.batched_calls += std::any_of(seqs.begin(), seqs.end(), [&](int s) { return s != seqs[0]; }) ? 1 : 0;
    // The rule's expectation first: every oracle's failure names its clause.
    expectation_.reset();
    if (rule_) expectation_ = rule_->on_decode(seqs, outputs);
    // Oracles one file each (oracle_*.cpp): the twin, data, then weld and
    // kv, then the blocks, then accounting.
    // First: it needs no model of what the plan bakes in.
    const std::vector<float> twin_rows = check_twin(pairs, got);
    check_peer(pairs, got, before);
    std::vector<std::vector<float>> want = check_data(pairs, oracles_.data || twin_rows.empty() ? got : twin_rows);
    for (const auto& [i, b] : blind) count_blindness(b, pairs[i].seq, pairs[i].pos);
    if (white_box_)
        for (const auto& [i, b] : blind) pin_plan(pairs[i].seq);
    check_weld(pairs);
    check_kv(pairs);
    check_blocks(true);
    check_accounting(pairs, before);
    return want;
}

}  // namespace kvweld::sim
