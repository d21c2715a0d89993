// Oracle selection: which oracles a run's engine allows, from its
// capabilities and its entry in the registry, why not the others (every
// report prints it), and the observers that judge the run, made once in
// the order they are told. Adding an oracle is its class, its entry in
// Oracles (sim/run_stats.hpp) and its lines here.
#include "sim/simulator.hpp"
#include "targets/plugin_rule.hpp"

#include "util/cat.hpp"
#include "sim/observers.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"

#include <algorithm>
#include <utility>

namespace kvweld::sim {

namespace {

// kvweld diff: the live settings both engines list, at the values both list.
std::vector<abi::LiveSetting> shared_live_settings(const std::string& mine, const std::string& theirs) {
    const std::vector<abi::LiveSetting> other = abi::split_live_list(theirs.c_str());
    std::vector<abi::LiveSetting> out;
    for (abi::LiveSetting s : abi::split_live_list(mine.c_str())) {
        const auto it = std::find_if(other.begin(), other.end(), [&](const abi::LiveSetting& o) { return o.key == s.key; });
        if (it == other.end()) continue;
        std::erase_if(s.values, [&](const std::string& v) { return std::find(it->values.begin(), it->values.end(), v) == it->values.end(); });
        if (!s.values.empty()) out.push_back(std::move(s));
    }
    return out;
}

}  // namespace

// Which oracles the engine's capabilities allow, and why not the others;
// then the observers, each registered once, in the order they are told.
void Simulator::open_observers(bool checked) {
    const std::uint32_t caps = engine_->capabilities();
    const std::string name = engine_->name();
    bool counters = caps & KVWELD_CAP_PLAN_COUNTERS;
    std::unique_ptr<ReuseRule> rule;
    if (!counters)
        oracles_.accounting_why_not = cat("engine ", name, " declares no plan counters");
    else
    {
        rule = reuse_rule_for(name, engine_build(config_.engine.engine), config_.setup(), oracles_.accounting_why_not);
        // Where kvweld has none, the rule the plugin ships (ABI 14), if any.
        if (!rule && (rule = shipped_rule(config_.engine.engine, config_.setup()))) oracles_.accounting_why_not.clear();
    }
    oracles_.accounting = rule != nullptr;
    oracles_.plan_identity = rule && (caps & KVWELD_CAP_PLAN_SERIAL);
    if (!oracles_.plan_identity) oracles_.plan_identity_why_not = cat("engine ", name, " reports no plan serial");
    oracles_.kv = caps & KVWELD_CAP_READ_KV;
    if (!oracles_.kv) oracles_.kv_why_not = cat("engine ", name, " cannot read back its KV rows");
    oracles_.weld = caps & KVWELD_CAP_STORAGE;
    if (!oracles_.weld)
        oracles_.weld_why_not = caps & KVWELD_CAP_BLOCKS ? cat("engine ", name, " has one pool, not storage per sequence: its "
                                                                              "weld is the blocks oracle's pool weld")
                                                         : cat("engine ", name, " reports no storage identity");
    std::optional<BlockModel> block_model;
    if (!(caps & KVWELD_CAP_BLOCKS))
        oracles_.blocks_why_not = cat("engine ", name, " has no paged KV pool to report");
    else if (!(block_model = block_model_for(name, config_.setup())))
        oracles_.blocks_why_not = cat("no block model for engine '", name, "' (targets/registry.cpp)");
    oracles_.blocks = block_model.has_value();
    white_box_ = engine_->white_box();
    oracles_.white_box = white_box_ != nullptr;
    if (!white_box_) oracles_.white_box_why_not = cat("engine ", name, " runs behind the plugin ABI");
    for (const std::string& f : abi::split_list(config_.engine.faults.c_str()))
        spec_reject_fault_ = spec_reject_fault_ || (white_box_ && f == "spec_reject_off_by_one");
    // Settings the reference cannot follow: the twin judges every row.
    oracles_.data_why_not = reference_blind(config_.engine.engine, config_.engine.params);
    oracles_.data = oracles_.data_why_not.empty();
    live_ = abi::split_live_list(engine_->live_settings().c_str());
    std::unique_ptr<Lockstep> second;
    if (config_.engine.peer) {  // the peer is the run's only oracle
        second = open_peer(world_, judge_, stats_, oracles_);
        live_ = shared_live_settings(engine_->live_settings(), second->second_live_settings());
        rule.reset();
        white_box_ = nullptr;
        spec_reject_fault_ = false;
    } else {
        second = open_twin(world_, judge_, stats_, oracles_);
        if (!oracles_.data && !second)
            oracles_.data_why_not += cat("; the twin, the data oracle here, is unavailable too: ", oracles_.twin_why_not);
    }
    if (!checked) {
        oracles_.all_off("an unchecked run (--no-oracles)");
        second.reset();
        rule.reset();  // nothing judged; the block model stays, it paces the pool's growth
        counters = false;
    }
    auto accounting = std::make_unique<Accounting>(world_, judge_, stats_, std::move(rule), counters, oracles_.plan_identity);
    accounting_ = accounting.get();
    lockstep_ = second.get();
    auto shadow = std::make_unique<DataShadow>(world_, judge_, stats_, oracles_.data);
    std::unique_ptr<FreshPrefill> fresh;
    if (config_.engine.peer) oracles_.fresh_why_not = "kvweld diff: the peer engine is the oracle";
    else if (!checked) oracles_.fresh_why_not = "an unchecked run (--no-oracles)";
    else fresh = open_fresh(world_, judge_, stats_, oracles_);
    auto ledger = std::make_unique<StorageLedger>(world_, judge_, accounting_->rule(), white_box_, seen_serials_,
                                                  oracles_.weld);
    std::unique_ptr<Observer> blindness, kv, blocks;
    if (white_box_ && oracles_.data) blindness = std::make_unique<Blindness>(world_, stats_, *shadow, *ledger);
    if (oracles_.kv) kv = std::make_unique<KvOracle>(world_, judge_, stats_, *shadow, white_box_ ? ledger.get() : nullptr);
    if (block_model) {
        auto b = std::make_unique<BlockLedger>(world_, judge_, std::move(*block_model), seen_serials_, oracles_.blocks);
        blocks_ = b.get();
        blocks = std::move(b);
    }
    // The order they are told: the rule's expectation first (every failure
    // names its clause), the second engine and the reference next (their
    // rows are what later ones read), storage and blocks after.
    std::unique_ptr<Observer> in_order[] = {std::move(accounting), std::move(second), std::move(shadow),
                                            std::move(fresh),      std::move(blindness), std::move(ledger),
                                            std::move(kv),         std::move(blocks)};
    for (auto& o : in_order)
        if (o) observers_.push_back(std::move(o));
}

}  // namespace kvweld::sim
