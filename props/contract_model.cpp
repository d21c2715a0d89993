#include "props/contract_model.hpp"

#include "util/enum_names.hpp"


namespace kvweld::props {

ModelConfig prop_config() {
    ModelConfig c = tiny_config();
    c.max_seq_len = 24;
    return c;
}

namespace {
constexpr NameTable<Prop, 5> kProps{{
    {Prop::data, "data"},
    {Prop::weld, "weld"},
    {Prop::accounting, "accounting"},
    {Prop::validity, "validity"},
    {Prop::ids, "ids"},
}};
}  // namespace

std::string_view to_string(Prop p) { return name_in(kProps, p); }

std::optional<Prop> prop_of_failure(std::string_view message) {
    for (const EnumName<Prop>& p : kProps)
        if (message.find(std::string("[") + std::string(p.name) + "]") != std::string_view::npos) return p.value;
    return std::nullopt;
}

ContractModel::ContractModel() { replace_all_storage(); }

void ContractModel::replace_all_storage() {
    storage.clear();
    for (int l = 0; l < prop_config().n_layers; ++l) storage.push_back(next_storage++);
}

ContractSut::ContractSut()
    : config(prop_config()),
      model(Model::random(config, weights_seed, &pool)),
      cache(KvCache::with_capacity(config)),
      shadow(config) {
    remember_id();
    for (int l = 0; l < config.n_layers; ++l) record_storage(l, l);  // ContractModel's first ids
}

void ContractSut::record_storage(int id, int l) {
    const StorageSerial s = cache.layer(l)->serial();
    PROP_ASSERT(Prop::ids, serials_seen.insert(s).second);
    serial_of[id] = s;
}

std::vector<StorageSerial> ContractSut::serials_of(const std::vector<int>& ids) const {
    std::vector<StorageSerial> out;
    for (int id : ids) out.push_back(serial_of.at(id));
    return out;
}

void ContractSut::reload(bool same_weights) {
    model.reset();  // first, so the pool may hand the same address back
    if (!same_weights) ++weights_seed;
    model.emplace(Model::random(config, weights_seed, &pool));
}

void ContractSut::remember_id() {
    PROP_ASSERT(Prop::ids, ids_seen.insert(cache.alloc_id().get()).second);
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
        else if (m.storage_changed()) ++m.rebinds;
        m.plan = true;
        m.plan_storage = m.storage;
        m.model_changed = false;
        ++m.len;
    }
    void run(const ContractModel& m, ContractSut& s) const override {
        const std::vector<float> want = reference_forward(*s.model, s.shadow, token, m.len);
        const std::span<const float> got = s.session.decode(*s.model, s.cache, token);
        PROP_ASSERT(Prop::data, logit_error(got, want) <= 1e-4);
        ContractModel next = m;
        apply(next);
        // The weld: bound to the storage the model says, through the SUT's own ledger.
        PROP_ASSERT(Prop::weld, s.session.bound_serials() == s.serials_of(next.plan_storage));
        PROP_ASSERT(Prop::accounting, s.session.counters().builds == next.builds);
        PROP_ASSERT(Prop::accounting, s.session.counters().rebinds == next.rebinds);
        PROP_ASSERT(Prop::accounting, s.cache.cached_len() == next.len);
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
        PROP_ASSERT(Prop::ids, s.cache.alloc_id() == before);
    }
    void show(std::ostream& os) const override { os << "Truncate(" << n << ")"; }
};

// Property 4: a context shift keeps the id (its rows are rewritten in
// place); property 1 then judges the moved keys, rotated afresh in the
// shadow, through every later decode.
struct Shift : Command {
    int p0, p1;
    std::optional<std::pair<int, int>> again;  // a second shift before the next decode: owed rotations add up
    explicit Shift(const ContractModel& m)
        : p0(*rc::gen::inRange(0, m.len + 1)), p1(*rc::gen::inRange(p0, m.len + 1)) {
        const int left = m.len - (p1 - p0);
        if (*rc::gen::arbitrary<bool>()) {
            const int q0 = *rc::gen::inRange(0, left + 1);
            again = std::pair{q0, *rc::gen::inRange(q0, left + 1)};
        }
    }
    void checkPreconditions(const ContractModel& m) const override {
        RC_PRE(p1 <= m.len);
        RC_PRE(!again || again->second <= m.len - (p1 - p0));
    }
    void apply(ContractModel& m) const override {
        m.len -= p1 - p0;
        if (again) m.len -= again->second - again->first;
    }
    void run(const ContractModel& m, ContractSut& s) const override {
        const KvAllocId before = s.cache.alloc_id();
        int len = m.len;
        for (const auto& [a, b] : {std::pair{p0, p1}, again.value_or(std::pair{0, 0})}) {
            s.shadow.shift(s.config, a, b, len);
            s.cache.shift(a, b);
            len -= b - a;
        }
        PROP_ASSERT(Prop::ids, s.cache.alloc_id() == before);
    }
    void show(std::ostream& os) const override {
        os << "Shift(" << p0 << ", " << p1 << ")";
        if (again) os << " then Shift(" << again->first << ", " << again->second << ")";
    }
};

// Property 4: clear, set_layer and construction always mint a new, never
// seen id.
// Records the real serials behind the abstract ids a full replacement mints.
void record_all(const ContractModel& before, ContractSut& s) {
    for (int l = 0; l < s.config.n_layers; ++l) s.record_storage(before.next_storage + l, l);
}

struct Clear : Command {
    void apply(ContractModel& m) const override {
        m.len = 0;
        m.replace_all_storage();
    }
    void run(const ContractModel& m, ContractSut& s) const override {
        s.cache.clear();
        s.remember_id();
        record_all(m, s);
    }
    void show(std::ostream& os) const override { os << "Clear"; }
};

struct SetLayer : Command {
    int layer = *rc::gen::inRange(0, prop_config().n_layers);
    void apply(ContractModel& m) const override { m.storage[static_cast<std::size_t>(layer)] = m.next_storage++; }
    void run(const ContractModel& m, ContractSut& s) const override {
        KvLayer copy = s.cache.layer(layer)->copy();
        const StorageSerial mine = copy->serial();
        s.cache.set_layer(layer, std::move(copy));
        s.remember_id();
        PROP_ASSERT(Prop::ids, s.cache.layer(layer)->serial() == mine);
        s.record_storage(m.next_storage, layer);
    }
    void show(std::ostream& os) const override { os << "SetLayer(" << layer << ")"; }
};

struct NewCache : Command {
    void apply(ContractModel& m) const override {
        m.len = 0;
        m.replace_all_storage();
    }
    void run(const ContractModel& m, ContractSut& s) const override {
        s.cache = KvCache::with_capacity(s.config);
        s.remember_id();
        record_all(m, s);
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
        const Validity want = m.model_changed       ? Validity::stale(BuildReason::model_instance)
                              : m.storage_changed() ? Validity::allocation_changed()
                                                    : Validity::valid();
        PROP_ASSERT(Prop::validity, v == want);
    }
    void show(std::ostream& os) const override { os << "Check"; }
};

}  // namespace

void check_contract() {
    ContractModel initial;
    ContractSut sut;
    rc::state::check(initial, sut,
                     rc::state::gen::execOneOfWithArgs<Decode, Decode, Decode, Truncate, Shift, Clear, SetLayer,
                                                       NewCache, Reload, Check, Check>());
}

}  // namespace kvweld::props
