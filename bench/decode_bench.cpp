// Held-plan decode against replan-every-token, tokens/s, one thread.
#include "engine/decode_session.hpp"

#include <benchmark/benchmark.h>

namespace kvweld {
namespace {

// Decodes a full max_seq_len sequence per iteration batch, restarting the
// cache when full, so every position's attention cost is represented.
void decode_loop(benchmark::State& state, const ModelConfig& config, SessionOptions opts) {
    const Model model = Model::random(config, 1);
    auto cache = KvCache::with_capacity(config);
    DecodeSession session(opts);
    int token = 1;
    for (auto _ : state) {
        if (cache.cached_len() == config.max_seq_len) cache.truncate_to(0);
        const std::span<const float> logits = session.decode(model, cache, token);
        benchmark::DoNotOptimize(logits.data());
        token = (token * 31 + 7) % config.vocab;
    }
    state.counters["tokens_per_s"] =
        benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_Held_Tiny(benchmark::State& s) { decode_loop(s, tiny_config(), {}); }
void BM_Replan_Tiny(benchmark::State& s) { decode_loop(s, tiny_config(), {.replan_every_token = true}); }
void BM_Held_Stories15M(benchmark::State& s) { decode_loop(s, stories15m_config(), {}); }
void BM_Replan_Stories15M(benchmark::State& s) {
    decode_loop(s, stories15m_config(), {.replan_every_token = true});
}

BENCHMARK(BM_Held_Tiny)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Replan_Tiny)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Held_Stories15M)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_Replan_Stories15M)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace
}  // namespace kvweld

BENCHMARK_MAIN();
