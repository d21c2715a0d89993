// Runs: a seed's generated run and a trace's replay (sim/run.hpp).
#include "sim/run.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/ddmin.hpp"
#include "sim/op_table.hpp"
#include "sim/jsonl.hpp"
#include "sim/known_findings.hpp"
#include "sim/report.hpp"
#include "sim/seed_pool.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace kvweld::sim {

namespace {

// The generator's PRNG is separate from the one that drew the config.
constexpr std::uint64_t kServeOpStream = 0x73657276652d6f70ULL;


RunResult finish(Simulator& sim, int steps, std::vector<Op> ops) {
    sim.end();
    return RunResult{sim.config(),  steps,         std::move(ops), sim.stats(),       sim.oracles(),
                     sim.verdict(), sim.failure(), "",             sim.reuse_diffs(), sim.ended_early()};
}

}  // namespace

RunResult run_generated(const SimConfig& config, int steps, bool checked) {
    Simulator sim(config, checked);
    Rng rng(config.seed ^ kServeOpStream);
    RngEntropy entropy(rng);
    std::vector<Op> ops;
    for (int i = 0; i < steps; ++i) {
        ops.push_back(draw_op(sim, entropy));
        if (!sim.apply(ops.back(), ops.size() - 1)) break;
    }
    return finish(sim, steps, std::move(ops));
}

RunResult run_ops(const SimConfig& config, const std::vector<Op>& ops, int steps,
                  const std::function<void(Simulator&)>& before) {
    Simulator sim(config);
    if (before) before(sim);
    std::vector<Op> ran;
    for (const Op& op : ops) {
        ran.push_back(op);
        if (!sim.apply(op, ran.size() - 1)) break;
    }
    return finish(sim, steps, std::move(ran));
}

}  // namespace kvweld::sim
