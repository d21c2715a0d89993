// The simulator's operations. Each op carries every argument that was
// drawn for it, so a trace replays without the generator. Slot choices are
// "picks" (an index into whatever slots are eligible when the op runs), so
// an op stays meaningful after the shrinker removes others.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvweld::sim {

enum class OpKind : std::uint8_t {
    admit,      // a request takes a free slot and is prefilled
    decode,     // one token
    spec,       // speculative: k decodes, accept m drafts, truncate, bonus token
    retire,     // the request finishes; the slot becomes free
    clear,      // preemption: clear() and re-prefill from history
    set_layer,  // swap-in: restore one layer from a copy (same content, new storage)
    truncate,   // rewind to an earlier length
    reload,     // the model is reloaded (same geometry)
    migrate,    // the request and its cache move to a free slot
};
inline constexpr int kOpKinds = 9;
std::string_view to_string(OpKind k);
OpKind op_kind_from_string(std::string_view s);  // throws Error naming s

struct Op {
    OpKind kind = OpKind::decode;
    std::uint32_t pick = 0;    // which eligible slot (mod their count)
    std::uint32_t pick2 = 0;   // migrate: which free slot; admit: which cache capacity
    std::vector<int> tokens;   // admit: prompt; spec: the k-1 draft tokens
    bool fresh = true;         // admit: new cache, or truncate_to(0) on the slot's own
    float accept = 0.0f;       // admit: the request's draft acceptance rate
    int max_new = 0;           // admit: output budget
    int m = 0;                 // spec: drafts accepted
    int layer = 0;             // set_layer: which layer (mod n_layers)
    std::uint32_t length = 0;  // truncate: new length (mod cached_len + 1)
    bool same_weights = false; // reload: same weights as now, or new ones
    std::uint64_t seed = 0;    // sampling (decode/spec/admit) or reload weights
};

void to_json(nlohmann::json& j, const Op& op);
// Strict: a missing, mistyped or out-of-range field throws Error naming it.
Op op_from_json(const nlohmann::json& j);

}  // namespace kvweld::sim
