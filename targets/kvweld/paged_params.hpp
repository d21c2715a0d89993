// The settings of kvweld's paged engine (`--engine kvweld-paged`, its
// plugin's params option), read by the plugin and by the serving
// simulator's reuse rule and block model, so both start from the same pool:
//   block=B   positions per block, a power of two in 1..1024 (default 16)
//   blocks=N  blocks the pool starts with (default: every sequence full)
//   backend=cpu|cuda  where the plan runs (default cpu)
// and the one growth rule: a pool out of blocks grows to twice its size.
#pragma once

#include "targets/abi_lists.hpp"

#include <string>

namespace kvweld::abi {

struct PagedParams {
    int block = 16;
    int blocks = 0;
    std::string backend = "cpu";
};

inline PagedParams paged_params(const char* text, int n_seq_max, int n_ctx) {
    const auto p = parse_params(text, {"block", "blocks", "backend"});
    PagedParams out;
    out.block = int_param(p, "block", 16, 1, 1024);
    if ((out.block & (out.block - 1)) != 0)
        throw std::runtime_error("setting block=" + std::to_string(out.block) + ": must be a power of two");
    const long full = long(n_seq_max) * ((long(n_ctx) + out.block - 1) / out.block);
    out.blocks = int_param(p, "blocks", int(full < 1 ? 1 : full > (1 << 20) ? (1 << 20) : full), 1, 1 << 20);
    if (const auto it = p.find("backend"); it != p.end()) out.backend = it->second;
    if (out.backend != "cpu" && out.backend != "cuda")
        throw std::runtime_error("setting backend=" + out.backend + ": must be cpu or cuda");
    return out;
}

inline int grown_blocks(int n_blocks) { return 2 * n_blocks; }

}  // namespace kvweld::abi
