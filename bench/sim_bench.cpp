// Simulator throughput: checked (with and without the twin) and unchecked
// decoded tokens (rows) per second on kvweld's engine in process. One fixed seed and model (tiny), so
// every repetition runs the same ops.
#include "targets/registry.hpp"
#include "sim/run.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace kvweld::sim {
namespace {

SimConfig bench_config(bool twin = false) {
    EngineChoice engine;
    engine.twin = twin;
    return draw_config(1, engine, "tiny", targets::engine_capabilities(std::string(targets::kDefaultEngine)));
}

void sim_loop(benchmark::State& state, bool checked, bool twin = false) {
    const SimConfig config = bench_config(twin);
    std::uint64_t rows = 0;
    for (auto _ : state) {
        const RunResult r = run_generated(config, 400, checked);
        if (r.verdict != Verdict::pass) state.SkipWithError("the simulation failed");
        rows += r.stats.rows;
    }
    state.counters["decodes_per_s"] = benchmark::Counter(double(rows), benchmark::Counter::kIsRate);
}

// The gated ratio: checked over unchecked throughput, measured as adjacent
// pairs (the same ops run both ways back to back) so that a noisy machine
// moves both halves alike; the counter is the median over the pairs. A run
// that fails stops early and would look fast: the benchmark errors out then.
void BM_CheckedOverUnchecked(benchmark::State& state) {
    using Clock = std::chrono::steady_clock;
    const SimConfig config = bench_config();
    bool failed = false;
    auto seconds = [&](bool checked) {
        const auto start = Clock::now();
        const RunResult r = run_generated(config, 400, checked);
        failed |= r.verdict != Verdict::pass;
        benchmark::DoNotOptimize(r.stats.rows);
        return std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<double> ratios;
    for (auto _ : state) ratios.push_back(seconds(false) / seconds(true));
    if (failed) return state.SkipWithError("the simulation failed: its time is not a throughput");
    std::sort(ratios.begin(), ratios.end());
    state.counters["ratio"] = ratios[ratios.size() / 2];
}

void BM_Unchecked(benchmark::State& s) { sim_loop(s, false); }
void BM_Checked(benchmark::State& s) { sim_loop(s, true); }
// Checked, with the differential twin (the engine again, reuse off) on too.
void BM_CheckedTwin(benchmark::State& s) { sim_loop(s, true, true); }

BENCHMARK(BM_Unchecked)->Name("sim/unchecked")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_Checked)->Name("sim/checked")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_CheckedTwin)->Name("sim/checked_twin")->Unit(benchmark::kMillisecond)->MinTime(0.5);
BENCHMARK(BM_CheckedOverUnchecked)->Name("sim/checked_over_unchecked")->Unit(benchmark::kMillisecond)->Iterations(15);

}  // namespace
}  // namespace kvweld::sim

BENCHMARK_MAIN();
