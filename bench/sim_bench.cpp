// Simulator throughput: checked and unchecked decode steps per second, and
// the cost of each oracle on its own. One fixed seed and model (tiny), so
// every repetition runs the same ops.
#include "sim/run.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace kvweld::sim {
namespace {

void sim_loop(benchmark::State& state, OracleSwitches oracles) {
    SimConfig config = draw_config(1, {.model = "tiny", .backend = Backend::cpu, .faults = {}});
    std::uint64_t decodes = 0;
    for (auto _ : state) {
        const RunResult r = run_generated(config, 400, oracles);
        if (r.verdict != Verdict::pass) state.SkipWithError("the simulation failed");
        decodes += r.stats.decodes;
    }
    state.counters["decodes_per_s"] = benchmark::Counter(double(decodes), benchmark::Counter::kIsRate);
}

// The gated ratio: checked over unchecked throughput, measured as adjacent
// pairs (the same ops run both ways back to back) so that a noisy machine
// moves both halves alike; the counter is the median over the pairs. A run
// that fails stops early and would look fast: the benchmark errors out then.
void BM_CheckedOverUnchecked(benchmark::State& state) {
    using Clock = std::chrono::steady_clock;
    const SimConfig config = draw_config(1, {.model = "tiny", .backend = Backend::cpu, .faults = {}});
    bool failed = false;
    auto seconds = [&](OracleSwitches o) {
        const auto start = Clock::now();
        const RunResult r = run_generated(config, 400, o);
        failed |= r.verdict != Verdict::pass;
        benchmark::DoNotOptimize(r.stats.decodes);
        return std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<double> ratios;
    for (auto _ : state) ratios.push_back(seconds(OracleSwitches::none()) / seconds(OracleSwitches{}));
    if (failed) return state.SkipWithError("the simulation failed: its time is not a throughput");
    std::sort(ratios.begin(), ratios.end());
    state.counters["ratio"] = ratios[ratios.size() / 2];
}

constexpr OracleSwitches only(bool data, bool kv, bool weld, bool accounting) {
    return {data, kv, weld, accounting};
}

void BM_Unchecked(benchmark::State& s) { sim_loop(s, OracleSwitches::none()); }
void BM_Checked(benchmark::State& s) { sim_loop(s, OracleSwitches{}); }
void BM_DataOracleOnly(benchmark::State& s) { sim_loop(s, only(true, false, false, false)); }
void BM_KvOracleOnly(benchmark::State& s) { sim_loop(s, only(false, true, false, false)); }
void BM_WeldOracleOnly(benchmark::State& s) { sim_loop(s, only(false, false, true, false)); }
void BM_AccountingOracleOnly(benchmark::State& s) { sim_loop(s, only(false, false, false, true)); }

BENCHMARK(BM_Unchecked)->Name("sim/unchecked")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_Checked)->Name("sim/checked")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_DataOracleOnly)->Name("sim/data_oracle_only")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_KvOracleOnly)->Name("sim/kv_oracle_only")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_WeldOracleOnly)->Name("sim/weld_oracle_only")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_CheckedOverUnchecked)->Name("sim/checked_over_unchecked")->Unit(benchmark::kMillisecond)->Iterations(15);
BENCHMARK(BM_AccountingOracleOnly)->Name("sim/accounting_oracle_only")->Unit(benchmark::kMillisecond)->MinTime(0.5);

}  // namespace
}  // namespace kvweld::sim

BENCHMARK_MAIN();
