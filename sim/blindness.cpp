// White box: the blindness counts. Right after a storage or model change
// (the held plan was prepared before it), would a plan that missed the
// change give the very same logits (data_blind), and also leave the right
// K/V rows in the storage the sequence holds (independent_blind)? Then no
// oracle that reads data could see the miss there, only the accounting and
// weld oracles. Reads the storage the ledger pinned and the plan's own
// pins, never the engine's reports.
#include "sim/observers.hpp"

#include "engine/reference.hpp"

#include <cstring>

namespace kvweld::sim {

namespace {

bool rows_equal(KvStorage& a, KvStorage& b, int rows) {
    for (KvStorage* s : {&a, &b})  // on a device backend the device copy is current
        if (s->device()) s->device()->download(*s, 0, rows);
    const std::size_t n = std::size_t(rows) * std::size_t(a.kv_dim()) * sizeof(float);
    return a.max_seq_len() == b.max_seq_len() && std::memcmp(a.key_row(0), b.key_row(0), n) == 0 &&
           std::memcmp(a.value_row(0), b.value_row(0), n) == 0;
}

std::span<const float> row_of(const std::vector<float>& plain, int pos, int kv_dim) {
    return std::span<const float>(plain).subspan(std::size_t(pos) * std::size_t(kv_dim), std::size_t(kv_dim));
}

}  // namespace

Blindness::Blindness(const World& world, RunStats& stats, const DataShadow& shadow, const StorageLedger& ledger)
    : world_(world), stats_(stats), shadow_(shadow), ledger_(ledger), plans_(std::size_t(world.config.seqs)) {}

// Measured before the decode, for each sequence's first row in the call.
void Blindness::before_decode(const Batch& b) {
    pending_.clear();
    for (std::size_t i = 0; i < b.pairs.size(); ++i)
        if (std::none_of(b.pairs.begin(), b.pairs.begin() + long(i), [&](const Pair& p) { return p.seq == b.pairs[i].seq; }))
            pending_.emplace_back(i, measure(b.pairs[i].seq, b.pairs[i].pos));
}

// Once the reference computed the right rows; then the plans stand on the
// storage the ledger pinned.
void Blindness::on_decode(Decoded& d) { settle(d.batch); }

void Blindness::settle(const Batch& b) {
    for (const auto& [i, m] : pending_) count(m, b.pairs[i].seq, b.pairs[i].pos);
    for (const auto& [i, m] : pending_) {
        PlanPins& plan = plans_[std::size_t(b.pairs[i].seq)];
        plan.exists = true;
        plan.model_generation = world_.model_generation;
        plan.weights_generation = world_.weights_generation;
        plan.storage = ledger_.pinned(b.pairs[i].seq);
    }
    pending_.clear();
}

// Measured before the call: what it kept is counted, the rest dropped.
void Blindness::on_aborted(const Batch& called, Decoded& kept) {
    const std::map<int, int> lengths = kept_lengths(called, kept.batch);
    std::erase_if(pending_, [&](const auto& m) { return called.pairs[m.first].pos >= lengths.at(called.pairs[m.first].seq); });
    settle(called);
}

Blindness::Measure Blindness::measure(int seq, int pos) const {
    Measure b;
    const PlanPins& plan = plans_[std::size_t(seq)];
    const std::vector<KvLayer>& now = ledger_.pinned(seq);
    if (!plan.exists || now.size() != plan.storage.size()) return b;
    const bool model_changed = plan.model_generation != world_.model_generation;
    bool storage_changed = false;
    for (std::size_t l = 0; l < now.size(); ++l) storage_changed = storage_changed || plan.storage[l] != now[l];
    b.change = model_changed || storage_changed;
    if (!b.change) return b;
    b.same_weights = !model_changed || plan.weights_generation == world_.weights_generation;
    b.storage_changed = storage_changed;
    bool indistinguishable = true;  // a plan welded to its old storage would read what the live one holds
    for (std::size_t l = 0; indistinguishable && l < now.size(); ++l)
        indistinguishable = plan.storage[l] == now[l] || rows_equal(*plan.storage[l], *now[l], pos);
    b.data_blind = b.same_weights && indistinguishable;
    const int kv_dim = world_.config.model.kv_dim();
    for (std::size_t l = 0; l < now.size(); ++l) {
        if (plan.storage[l] == now[l]) continue;
        KvStorage& s = *now[l];
        if (s.device()) s.device()->download(s, pos, 1);
        b.layers.push_back(int(l));
        b.key_before.emplace_back(s.key_row(pos), s.key_row(pos) + kv_dim);
        b.value_before.emplace_back(s.value_row(pos), s.value_row(pos) + kv_dim);
    }
    return b;
}

// The kv oracle is blind when a plan that missed the change would leave the
// right rows in the ledger's storage anyway: the weights are the same and
// every layer it would miss already held the right row before the decode.
void Blindness::count(const Measure& b, int seq, int pos) {
    if (!b.change) return;
    ++stats_.change_decodes;
    stats_.data_blind += b.data_blind;
    const ReferenceKv& want = shadow_.shadow(seq);
    const int kv_dim = world_.config.model.kv_dim();
    bool kv_blind = b.same_weights;
    for (std::size_t i = 0; kv_blind && i < b.layers.size(); ++i) {
        const auto l = std::size_t(b.layers[i]);
        kv_blind = logit_error(b.key_before[i], row_of(want.key[l], pos, kv_dim)) <= kDataTolerance &&
                   logit_error(b.value_before[i], row_of(want.value[l], pos, kv_dim)) <= kDataTolerance;
    }
    if (!(b.data_blind && kv_blind)) return;
    ++stats_.independent_blind;
    // Identical weights reloaded with the storage untouched: a plan that
    // missed it computes exactly the right thing; only accounting sees it.
    if (!b.storage_changed) ++stats_.blind_same_weights_reload;
}

}  // namespace kvweld::sim
