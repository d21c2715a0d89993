// What several ops' rows share (sim/ops/<kind>.cpp): which sequences are
// eligible, the JSON fields more than one kind reads, and the rewrite of
// truncate and preempt. Only the op files include it.
#pragma once

#include "sim/entropy.hpp"
#include "sim/json_field.hpp"
#include "sim/simulator.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <vector>

namespace kvweld::sim::row {

using nlohmann::json;

inline const std::vector<int> kOne{0};  // an op of the engine's, not of a sequence

inline std::vector<int> when(bool able) { return able ? kOne : std::vector<int>{}; }
inline bool can(const Simulator& s, std::uint32_t cap) { return (s.capabilities() & cap) != 0; }

// The open sequences whose request satisfies `ok`.
template <class F>
std::vector<int> open_where(const Simulator& s, F&& ok) {
    std::vector<int> out;
    for (int seq = 0; seq < s.config().seqs; ++seq)
        if (const auto& r = s.request(seq); r && ok(*r)) out.push_back(seq);
    return out;
}
inline std::vector<int> with_history(const Simulator& s) {
    return open_where(s, [](const Request& r) { return !r.history.empty(); });
}
inline std::vector<int> any_open(const Simulator& s) {
    return open_where(s, [](const Request&) { return true; });
}

inline std::vector<int> non_negative(const json& j, const char* name) {
    auto values = json_field<std::vector<int>>(j, name);
    for (int v : values) require(v >= 0, "field '", name, "' holds a negative value ", v);
    return values;
}
inline bool optional_flag(const json& j, const char* name) { return j.contains(name) && json_field<bool>(j, name); }

// A rewrite is written only when drawn (its seed with it).
inline ops::Rewrite draw_rewrite(Entropy& e) {
    ops::Rewrite r{e.chance(0.5), 0};
    if (r.on) r.seed = e.seed();
    return r;
}
inline void write_rewrite(json& j, const ops::Rewrite& r) {
    if (!r.on) return;
    j["rewrite"] = true;
    j["seed"] = r.seed;
}
inline ops::Rewrite read_rewrite(const json& j) {
    ops::Rewrite r{optional_flag(j, "rewrite"), 0};
    if (r.on) r.seed = json_field<std::uint64_t>(j, "seed");
    return r;
}

// Each sequence asks for `draw()` tokens.
template <class F>
std::vector<int> wants_for(const Simulator& s, F&& draw) {
    std::vector<int> wants(std::size_t(s.config().seqs));
    for (int& want : wants) want = draw();
    return wants;
}

}  // namespace kvweld::sim::row
