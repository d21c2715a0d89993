// kvweld-paged's settings a seed draws (engines/registry.hpp): a block size
// (16 most often, as serving engines use) and a starting pool from one
// block up to every sequence full, so that most runs exhaust it and grow;
// a setting given (--params) wins.
#include "engine/cat.hpp"
#include "engines/abi_lists.hpp"
#include "engines/kvweld/paged_params.hpp"
#include "engines/registry.hpp"

#include <algorithm>
#include <iterator>

namespace kvweld::engines {

std::string kvweld_paged_settings(const EngineSetup& setup, Rng& rng) {
    constexpr int kBlocks[] = {1, 2, 4, 8, 16, 16, 16, 32, 64};
    const int drawn = kBlocks[rng.below(std::size(kBlocks))];
    const auto given = abi::parse_params(setup.params.c_str(), {"block", "blocks", "backend"});
    const int block = given.count("block") ? abi::paged_params(setup.params.c_str(), setup.seqs, setup.n_ctx).block
                                           : drawn;
    const int full = setup.seqs * ((setup.n_ctx + block - 1) / block);
    const std::int64_t blocks = rng.range(1, std::max(1, full));
    std::string out = setup.params;
    if (!given.count("block")) out += cat(out.empty() ? "" : ",", "block=", block);
    if (!given.count("blocks")) out += cat(out.empty() ? "" : ",", "blocks=", blocks);
    return out;
}

}  // namespace kvweld::engines
