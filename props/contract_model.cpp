#include "props/contract_model.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld::props {

ModelConfig prop_config() {
    ModelConfig c = tiny_config();
    c.max_seq_len = 24;
    return c;
}

ContractSut::ContractSut()
    : config(prop_config()),
      model(Model::random(config, weights_seed, &pool)),
      cache(KvCache::with_capacity(config)),
      shadow(config) {
    remember_id();
}

void ContractSut::reload(bool same_weights) {
    model.reset();  // first, so the pool may hand the same address back
    if (!same_weights) ++weights_seed;
    model.emplace(Model::random(config, weights_seed, &pool));
}

void ContractSut::remember_id() {
    RC_ASSERT(ids_seen.insert(cache.alloc_id().get()).second);
}

namespace {

// Property 1: every held-plan decode equals the reference. Property 3:
// builds and rebinds equal what the contract justifies. Also the weld:
// after a decode the plan is bound to exactly the cache's storage.
struct Decode : Command {
    int token;
    explicit Decode(const ContractModel& m) : token(*rc::gen::inRange(0, prop_config().vocab)) {
        RC_PRE(m.len < prop_config().max_seq_len);
    }
    void checkPreconditions(const ContractModel& m) const override { RC_PRE(m.len < prop_config().max_seq_len); }
    void apply(ContractModel& m) const override {
        if (!m.plan || m.model_changed) ++m.builds;
        else if (m.storage_changed) ++m.rebinds;
        m.plan = true;
        m.storage_changed = m.model_changed = false;
        ++m.len;
    }
    void run(const ContractModel& m, ContractSut& s) const override {
        const std::vector<float> want = reference_forward(*s.model, s.shadow, token, m.len);
        const std::span<const float> got = s.session.decode(*s.model, s.cache, token);
        double worst = 0.0;
        for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
        RC_ASSERT(worst <= 1e-4);
        RC_ASSERT(s.session.bound_serials() == s.cache.storage_serials());
        ContractModel next = m;
        apply(next);
        RC_ASSERT(s.session.counters().builds == next.builds);
        RC_ASSERT(s.session.counters().rebinds == next.rebinds);
        RC_ASSERT(s.cache.cached_len() == next.len);
    }
    void show(std::ostream& os) const override { os << "Decode(" << token << ")"; }
};

// Property 4: truncate_to never changes the id.
struct Truncate : Command {
    int n;
    explicit Truncate(const ContractModel& m) : n(*rc::gen::inRange(0, m.len + 1)) {}
    void checkPreconditions(const ContractModel& m) const override { RC_PRE(n <= m.len); }
    void apply(ContractModel& m) const override { m.len = n; }
    void run(const ContractModel&, ContractSut& s) const override {
        const KvAllocId before = s.cache.alloc_id();
        s.cache.truncate_to(n);
        RC_ASSERT(s.cache.alloc_id() == before);
    }
    void show(std::ostream& os) const override { os << "Truncate(" << n << ")"; }
};

// Property 4: clear, set_layer and construction always mint a new, never
// seen id.
struct Clear : Command {
    void apply(ContractModel& m) const override {
        m.len = 0;
        m.storage_changed = m.plan;
    }
    void run(const ContractModel&, ContractSut& s) const override {
        s.cache.clear();
        s.remember_id();
    }
    void show(std::ostream& os) const override { os << "Clear"; }
};

struct SetLayer : Command {
    int layer = *rc::gen::inRange(0, prop_config().n_layers);
    void apply(ContractModel& m) const override { m.storage_changed = m.plan; }
    void run(const ContractModel&, ContractSut& s) const override {
        s.cache.set_layer(layer, s.cache.layer(layer)->copy());
        s.remember_id();
    }
    void show(std::ostream& os) const override { os << "SetLayer(" << layer << ")"; }
};

struct NewCache : Command {
    void apply(ContractModel& m) const override {
        m.len = 0;
        m.storage_changed = m.plan;
    }
    void run(const ContractModel&, ContractSut& s) const override {
        s.cache = KvCache::with_capacity(s.config);
        s.remember_id();
    }
    void show(std::ostream& os) const override { os << "NewCache"; }
};

struct Reload : Command {
    bool same_weights = *rc::gen::arbitrary<bool>();
    void apply(ContractModel& m) const override { m.model_changed = m.plan; }
    void run(const ContractModel&, ContractSut& s) const override { s.reload(same_weights); }
    void show(std::ostream& os) const override { os << "Reload(" << (same_weights ? "same" : "new") << " weights)"; }
};

// Property 2: the check says Valid exactly when neither storage nor model
// changed since the plan was built or rebound, in both directions.
struct Check : Command {
    explicit Check(const ContractModel& m) { RC_PRE(m.plan); }
    void checkPreconditions(const ContractModel& m) const override { RC_PRE(m.plan); }
    void run(const ContractModel& m, ContractSut& s) const override {
        const Validity v = s.session.check(*s.model, s.cache);
        const Validity want = m.model_changed     ? Validity::stale(StaleReason::model_instance)
                              : m.storage_changed ? Validity::allocation_changed()
                                                  : Validity::valid();
        RC_ASSERT(v == want);
    }
    void show(std::ostream& os) const override { os << "Check"; }
};

}  // namespace

void check_contract() {
    ContractModel initial;
    ContractSut sut;
    rc::state::check(initial, sut,
                     rc::state::gen::execOneOfWithArgs<Decode, Decode, Decode, Truncate, Clear, SetLayer,
                                                       NewCache, Reload, Check, Check>());
}

}  // namespace kvweld::props
