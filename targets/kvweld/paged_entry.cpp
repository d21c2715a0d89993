// kvweld's paged engine in the registry ("kvweld-paged"): its block model,
// the settings a seed draws (a block size, 16 most often, as serving
// engines use, and a starting pool from one block up to every sequence
// full, so that most runs exhaust it and grow; a setting given wins), and
// the settings the reuse study compares.
#include "util/cat.hpp"
#include "targets/abi_lists.hpp"
#include "targets/kvweld/paged_params.hpp"
#include "targets/kvweld/kvweld_entries.hpp"

#include <algorithm>
#include <iterator>

#ifndef KVWELD_PAGED_PLUGIN_PATH
#define KVWELD_PAGED_PLUGIN_PATH ""
#endif

namespace kvweld::targets {

namespace {

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

// Block sizes 1, 4, 16 and 64, each pool holding every slot's mean request.
std::vector<StudySetting> kvweld_paged_study(const std::string& params, const StudyTraffic& traffic, bool) {
    if (!params.empty()) return {{params, ""}};
    std::vector<StudySetting> out;
    for (int block : {1, 4, 16, 64}) {
        const int per_request = (traffic.mean_request + block - 1) / block;
        out.push_back({cat("block=", block, ",blocks=", traffic.slots * per_request), ""});
    }
    return out;
}

}  // namespace

const EngineEntry kKvweldPagedEntry{
    .name = "kvweld-paged",
    .plugin = KVWELD_PAGED_PLUGIN_PATH,
    .rule = kvweld_paged_reuse_rule,
    .block_model = BlockModel::for_kvweld_paged,
    .draw_settings = kvweld_paged_settings,
    .study_settings = kvweld_paged_study,
};

}  // namespace kvweld::targets
