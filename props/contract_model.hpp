// A RapidCheck state machine for the plan contract: commands for every
// cache and session operation, an abstract model of what the contract says
// must happen, and the real engine as the system under test.
#pragma once

#include "engine/decode_session.hpp"
#include "engine/reference.hpp"

#include "engine/recycling_resource.hpp"

#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kvweld::props {

ModelConfig prop_config();  // tiny, two layers, GQA, short capacity

// The properties, each named in its failure message so that a fault's
// counterexample can be required to break the property it should.
enum class Prop { data, weld, accounting, validity, ids };
std::string_view to_string(Prop p);
// The property a failure message names (from PROP_ASSERT), if any.
std::optional<Prop> prop_of_failure(std::string_view message);

#define PROP_ASSERT(prop, cond)                                                              \
    do {                                                                                     \
        if (!(cond)) RC_FAIL(std::string("[") + std::string(to_string(prop)) + "] " #cond); \
    } while (false)

// The abstract model: only what the contract talks about. Storage identity
// is the model's own: every replacement of a layer's storage gets the next
// abstract id, and the plan must be bound to the ids it was last prepared
// against. The system under test maps abstract ids to real serials only
// after checking that each is a serial it has never seen.
struct ContractModel {
    ContractModel();
    int len = 0;                    // cached_len
    bool plan = false;              // a plan has been built
    std::vector<int> storage;       // per layer: the abstract storage the cache holds
    std::vector<int> plan_storage;  // per layer: what the plan is bound to
    int next_storage = 0;
    bool model_changed = false;
    std::uint64_t builds = 0;       // justified so far
    std::uint64_t rebinds = 0;

    bool storage_changed() const { return plan && storage != plan_storage; }
    void replace_all_storage();
};

// The system under test: a model, one cache, one session, and the
// reference shadow of the cache's token history.
struct ContractSut {
    ContractSut();
    void reload(bool same_weights);
    void remember_id();  // asserts the cache's id was never seen before
    // Maps abstract storage id `id` to layer l's real serial, which must be
    // new: the SUT's own ledger, never copied from the engine unchecked.
    void record_storage(int id, int l);
    std::vector<StorageSerial> serials_of(const std::vector<int>& ids) const;

    RecyclingResource pool;  // recycles weight addresses on purpose
    ModelConfig config;
    std::uint64_t weights_seed = 1;
    std::optional<Model> model;
    KvCache cache;
    DecodeSession session;
    ReferenceKv shadow;
    std::set<std::uint64_t> ids_seen;
    std::set<StorageSerial> serials_seen;
    std::map<int, StorageSerial> serial_of;
};

using Command = rc::state::Command<ContractModel, ContractSut>;

// Runs one random command sequence against a fresh model and engine.
void check_contract();

}  // namespace kvweld::props
