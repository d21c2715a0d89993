// llama.cpp's settings a seed draws (engines/registry.hpp): either KV layout
// (kv_unified half the time) and graph reuse mostly on (off one time in
// five, so a reload under graph_reuse=0 is drawn too); a setting given
// (--params) wins.
#include "engine/cat.hpp"
#include "engines/abi_lists.hpp"
#include "engines/registry.hpp"

namespace kvweld::engines {

std::string llamacpp_settings(const EngineSetup& setup, Rng& rng) {
    const auto given = abi::parse_params(setup.params.c_str(), {"kv_unified", "graph_reuse"});
    const bool unified = rng.chance(0.5), reuse = rng.chance(0.8);
    std::string out = setup.params;
    if (!given.count("kv_unified")) out += cat(out.empty() ? "" : ",", "kv_unified=", unified ? 1 : 0);
    if (!given.count("graph_reuse")) out += cat(out.empty() ? "" : ",", "graph_reuse=", reuse ? 1 : 0);
    return out;
}

}  // namespace kvweld::engines
