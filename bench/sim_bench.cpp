// Simulator throughput: checked and unchecked decode steps per second, and
// the cost of each oracle on its own. One fixed seed and model (tiny), so
// every repetition runs the same ops.
#include "sim/run.hpp"

#include <benchmark/benchmark.h>

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

void BM_Unchecked(benchmark::State& s) { sim_loop(s, {false, false, false}); }
void BM_Checked(benchmark::State& s) { sim_loop(s, {true, true, true}); }
void BM_DataOracleOnly(benchmark::State& s) { sim_loop(s, {true, false, false}); }
void BM_WeldOracleOnly(benchmark::State& s) { sim_loop(s, {false, true, false}); }
void BM_AccountingOracleOnly(benchmark::State& s) { sim_loop(s, {false, false, true}); }

BENCHMARK(BM_Unchecked)->Name("sim/unchecked")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_Checked)->Name("sim/checked")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_DataOracleOnly)->Name("sim/data_oracle_only")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_WeldOracleOnly)->Name("sim/weld_oracle_only")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_AccountingOracleOnly)->Name("sim/accounting_oracle_only")->Unit(benchmark::kMillisecond)->MinTime(0.5);

}  // namespace
}  // namespace kvweld::sim

BENCHMARK_MAIN();
