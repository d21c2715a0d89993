// A RapidCheck state machine for the plan contract: commands for every
// cache and session operation, an abstract model of what the contract says
// must happen, and the real engine as the system under test.
#pragma once

#include "engine/decode_session.hpp"
#include "engine/reference.hpp"

#include "engine/recycling_resource.hpp"

#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <optional>
#include <set>
#include <vector>

namespace kvweld::props {

ModelConfig prop_config();  // tiny, two layers, GQA, short capacity

// The abstract model: only what the contract talks about.
struct ContractModel {
    int len = 0;                  // cached_len
    bool plan = false;            // a plan has been built
    bool storage_changed = false; // since the plan was built or rebound
    bool model_changed = false;
    std::uint64_t builds = 0;     // justified so far
    std::uint64_t rebinds = 0;
};

// The system under test: a model, one cache, one session, and the
// reference shadow of the cache's token history.
struct ContractSut {
    ContractSut();
    void reload(bool same_weights);
    void remember_id();  // asserts the cache's id was never seen before

    RecyclingResource pool;  // recycles weight addresses on purpose
    ModelConfig config;
    std::uint64_t weights_seed = 1;
    std::optional<Model> model;
    KvCache cache;
    DecodeSession session;
    ReferenceKv shadow;
    std::set<std::uint64_t> ids_seen;
};

using Command = rc::state::Command<ContractModel, ContractSut>;

// Runs one random command sequence against a fresh model and engine.
void check_contract();

}  // namespace kvweld::props
