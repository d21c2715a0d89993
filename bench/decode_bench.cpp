// Decode throughput: held plan, rebind every token, and replan every token;
// tiny and stories15M dims; CPU always, CUDA when a device is present
// (skipped otherwise); and, where llama.cpp was built (scripts/setup),
// llama.cpp on the same weights beside kvweld's held plan, 1 and 2 threads,
// with the paired kvweld/llama.cpp ratio; and every built-in engine through
// the plugin ABI (decode/abi/...). Every engine kvweld did not write is
// driven through the Engine interface the simulator drives (targets/).
// tokens/s is a counter.
#include "engine/decode_session.hpp"
#include "util/error.hpp"
#include "targets/registry.hpp"

#include "engine/weight_memory.hpp"
#include "engine/worker_pool.hpp"

#include <benchmark/benchmark.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace kvweld {
namespace {

enum class Mode { held, rebind, replan };

// Decodes positions 0..max_seq_len-1 over and over. In rebind mode two
// same-shape caches alternate, so every token is an AllocationChanged.
void decode_loop(benchmark::State& state, const ModelConfig& config, Backend backend, Mode mode) {
    std::string why;
    if (backend == Backend::cuda && !cuda_backend_available(&why)) {
        state.SkipWithError(("no CUDA device: " + why).c_str());
        return;
    }
    const Model model = Model::random(config, 1);
    KvCache caches[2] = {KvCache::with_capacity(config), KvCache::with_capacity(config)};
    DecodeSession session({.replan_every_token = mode == Mode::replan, .backend = backend});
    int token = 1;
    std::uint64_t i = 0;
    for (auto _ : state) {
        KvCache& cache = caches[mode == Mode::rebind ? i++ % 2 : 0];
        if (cache.cached_len() == config.max_seq_len) cache.truncate_to(0);
        const std::span<const float> logits = session.decode(model, cache, token);
        benchmark::DoNotOptimize(logits.data());
        token = (token * 31 + 7) % config.vocab;
    }
    state.counters["tokens_per_s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["rebinds"] = double(session.counters().rebinds);
    state.counters["builds"] = double(session.counters().builds);
}

// The gated ratio: held-plan over replan-every-token throughput, measured
// in adjacent blocks so machine noise moves both alike; median of blocks.
void held_over_replan(benchmark::State& state, const ModelConfig& config, int block) {
    using Clock = std::chrono::steady_clock;
    const Model model = Model::random(config, 1);
    KvCache held_cache = KvCache::with_capacity(config), replan_cache = KvCache::with_capacity(config);
    DecodeSession held, replan({.replan_every_token = true});
    auto seconds = [&](DecodeSession& s, KvCache& c) {
        const auto start = Clock::now();
        for (int i = 0; i < block; ++i) {
            if (c.cached_len() == config.max_seq_len) c.truncate_to(0);
            benchmark::DoNotOptimize(s.decode(model, c, 1 + i % 7).data());
        }
        return std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<double> ratios;
    for (auto _ : state) ratios.push_back(seconds(replan, replan_cache) / seconds(held, held_cache));
    std::sort(ratios.begin(), ratios.end());
    state.counters["ratio"] = ratios[ratios.size() / 2];
}

bool engine_built(const char* engine) {
    try {
        targets::engine_plugin_path(engine);
        return true;
    } catch (const Error&) {
        return false;  // not built here
    }
}

// An engine behind the Engine interface (the one the simulator drives:
// llama.cpp through its adapter) decoding one sequence one token at a
// time, wrapping to position 0 when the context is full.
class EngineRunner {
public:
    EngineRunner(const std::string& engine, const Model& model, int threads)
        : n_ctx_(model.config().max_seq_len),
          engine_(targets::open_engine(engine, "", {"", 1, n_ctx_, threads}, model)) {
        engine_->apply(targets::calls::Open{0});
    }
    std::vector<float> decode(int token) {
        if (pos_ == n_ctx_) engine_->apply(targets::calls::Truncate{0, pos_ = 0});
        ++pos_;
        return engine_->decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{token});
    }
    std::uint64_t reused() const { return engine_->counters().value_or(kvweld_engine_counters{}).reused; }

private:
    int n_ctx_, pos_ = 0;
    std::unique_ptr<targets::Engine> engine_;
};

void llamacpp_loop(benchmark::State& state, const ModelConfig& config, int threads) {
    const Model model = Model::random(config, 1);
    EngineRunner llama("llamacpp", model, threads);
    int token = 1;
    for (auto _ : state) {
        benchmark::DoNotOptimize(llama.decode(token).data());
        token = (token * 31 + 7) % config.vocab;
    }
    state.counters["tokens_per_s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["graph_reused"] = double(llama.reused());
}

// kvweld's held plan over llama.cpp's decode, same weights and thread
// count, in adjacent blocks of `block` tokens; median of the block ratios.
// Blocks are long (64 tokens at stories15M dims) because with two threads
// each engine's idle workers spin for a while into the other's block.
void kvweld_over_llamacpp(benchmark::State& state, const ModelConfig& config, int threads, int block) {
    using Clock = std::chrono::steady_clock;
    const Model model = Model::random(config, 1);
    EngineRunner llama("llamacpp", model, threads);
    KvCache cache = KvCache::with_capacity(config);
    DecodeSession held({.threads = threads});
    auto timed = [&](auto&& step) {
        const auto start = Clock::now();
        for (int i = 0; i < block; ++i) step(1 + i % 7);
        return std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<double> ratios;
    for (auto _ : state) {
        const double ours = timed([&](int t) {
            if (cache.cached_len() == config.max_seq_len) cache.truncate_to(0);
            benchmark::DoNotOptimize(held.decode(model, cache, t).data());
        });
        const double theirs = timed([&](int t) { benchmark::DoNotOptimize(llama.decode(t).data()); });
        ratios.push_back(theirs / ours);
    }
    std::sort(ratios.begin(), ratios.end());
    state.counters["ratio"] = ratios[ratios.size() / 2];
}

void register_llamacpp() {
    if (!engine_built("llamacpp")) return;
    for (const char* dims : {"stories15m", "110m"})
        for (int threads : {1, 2}) {
            const ModelConfig cfg = config_by_name(dims);
            const std::string t = "/t" + std::to_string(threads), d = dims;
            benchmark::RegisterBenchmark(("decode/llamacpp/" + d + "/held" + t).c_str(),
                                         [cfg, threads](benchmark::State& s) { llamacpp_loop(s, cfg, threads); })
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(1.0);
            benchmark::RegisterBenchmark(("decode/cpu/" + d + "/kvweld_over_llamacpp" + t).c_str(),
                                         [cfg, threads, block = d == "110m" ? 16 : 64](benchmark::State& s) {
                                             kvweld_over_llamacpp(s, cfg, threads, block);
                                         })
                ->Unit(benchmark::kMillisecond)
                ->Iterations(9);
        }
}

// One sequence through the plugin ABI (targets/plugin_host.hpp), one token
// per call, one thread: what the simulator's interface costs each engine.
void abi_loop(benchmark::State& state, const ModelConfig& config, const std::string& engine) {
    const targets::EngineSetup setup{"", 1, config.max_seq_len};
    const Model model = Model::random(config, 1);
    const std::unique_ptr<targets::Engine> plugin = targets::open_engine(engine, "", setup, model);
    plugin->apply(targets::calls::Open{0});
    int token = 1, len = 0;
    for (auto _ : state) {
        if (len == setup.n_ctx) plugin->apply(targets::calls::Truncate{0, len = 0});
        benchmark::DoNotOptimize(plugin->decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{token}).data());
        ++len;
        token = (token * 31 + 7) % config.vocab;
    }
    state.counters["tokens_per_s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}

void register_abi() {
    for (const char* engine : {"kvweld", "llamacpp"}) {
        if (!engine_built(engine)) continue;
        const ModelConfig cfg = config_by_name("stories15m");
        benchmark::RegisterBenchmark((std::string("decode/abi/stories15m/") + engine).c_str(),
                                     [cfg, e = std::string(engine)](benchmark::State& s) { abi_loop(s, cfg, e); })
            ->Unit(benchmark::kMicrosecond)
            ->MinTime(1.0);
    }
}

// The peer that bounds every engine here: one pass reading every weight a
// token needs, with no arithmetic beyond a sum, as tokens/s, on `threads`
// threads (each its own contiguous share, as a plan's rows are split). It
// is written to read as fast as this machine can: eight independent
// 16-float accumulators, so no add waits on the one before (a single
// accumulator chain runs at one 64-byte add per add latency, well under
// what L3 delivers). Decoding FP32 weights from the same memory cannot beat
// it on this machine.
float stream_sum(const float* w, std::size_t n) {
#if defined(__AVX512F__)
    __m512 acc[8];
    for (__m512& a : acc) a = _mm512_setzero_ps();
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128)
        for (int k = 0; k < 8; ++k) acc[k] = _mm512_add_ps(acc[k], _mm512_loadu_ps(w + i + 16 * k));
    for (int k = 1; k < 8; ++k) acc[0] = _mm512_add_ps(acc[0], acc[k]);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, acc[0]);
    float sum = 0.0f;
    for (float l : lanes) sum += l;
#else
    float part[8][16] = {};
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128)
        for (int k = 0; k < 8; ++k)
#pragma omp simd
            for (int l = 0; l < 16; ++l) part[k][l] += w[i + 16 * k + l];
    float sum = 0.0f;
    for (auto& p : part)
        for (float v : p) sum += v;
#endif
    for (; i < n; ++i) sum += w[i];
    return sum;
}

// The weights as a plan keeps them (weight memory: huge pages where the
// kernel gives them), or, for comparison in the same run, in an ordinary
// vector's 4 KiB pages, where the plan kept them before. (llama.cpp maps its
// GGUF file; on this project's machine the kernel maps that file's page
// cache in 2 MiB pages: /proc/PID/smaps shows it as FilePmdMapped.)
template <class Vector>
void weights_stream(benchmark::State& state, const ModelConfig& config, int threads) {
    const std::size_t n = Model::weight_count(config, false) - std::size_t(config.vocab - 1) * config.dim;
    const Vector w(n, 1e-3f);
    WorkerPool pool(threads);
    std::vector<float> sums(static_cast<std::size_t>(threads));
    for (auto _ : state) {
        pool.run([&](int t) {
            const std::size_t first = n * std::size_t(t) / std::size_t(threads);
            const std::size_t last = n * std::size_t(t + 1) / std::size_t(threads);
            sums[std::size_t(t)] = stream_sum(w.data() + first, last - first);
        });
        benchmark::DoNotOptimize(sums.data());
    }
    state.counters["tokens_per_s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
    state.counters["GB_per_s"] = benchmark::Counter(double(state.iterations()) * double(n) * 4 / 1e9,
                                                    benchmark::Counter::kIsRate);
}

void held_threads(benchmark::State& state, const ModelConfig& config, int threads) {
    const Model model = Model::random(config, 1);
    KvCache cache = KvCache::with_capacity(config);
    DecodeSession session({.threads = threads});
    // The build is not the held plan's throughput: at 110m it alone can
    // outlast the minimum time and leave a one-iteration measurement.
    benchmark::DoNotOptimize(session.decode(model, cache, 1).data());
    int token = 1;
    for (auto _ : state) {
        if (cache.cached_len() == config.max_seq_len) cache.truncate_to(0);
        benchmark::DoNotOptimize(session.decode(model, cache, token).data());
        token = (token * 31 + 7) % config.vocab;
    }
    state.counters["tokens_per_s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
    // Whether the plan's weights got huge pages (weights_MB of them, at most).
    state.counters["huge_MB"] = double(anon_huge_page_bytes()) / 1e6;
    state.counters["weights_MB"] = double(model.all_weights().size_bytes()) / 1e6;
}

void register_all() {
    register_abi();
    for (const char* dims : {"stories15m", "110m"}) {
        const ModelConfig cfg = config_by_name(dims);
        const std::string d = dims;
        for (int threads : {1, 2}) {
            const std::string t = "/t" + std::to_string(threads);
            benchmark::RegisterBenchmark(("decode/cpu/" + d + "/weights_stream" + t).c_str(),
                                         [cfg, threads](benchmark::State& s) {
                                             weights_stream<std::vector<float, WeightAllocator<float>>>(s, cfg, threads);
                                         })
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(0.5);
            benchmark::RegisterBenchmark(("decode/cpu/" + d + "/weights_stream_4k_pages" + t).c_str(),
                                         [cfg, threads](benchmark::State& s) {
                                             weights_stream<std::vector<float>>(s, cfg, threads);
                                         })
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(0.5);
        }
        for (int threads : {1, 2})
            benchmark::RegisterBenchmark(("decode/cpu/" + d + "/held/t" + std::to_string(threads)).c_str(),
                                         [cfg, threads](benchmark::State& s) { held_threads(s, cfg, threads); })
                ->Unit(benchmark::kMicrosecond)
                ->MinTime(1.0);
    }
    register_llamacpp();
    benchmark::RegisterBenchmark("decode/cpu/tiny/held_over_replan", [](benchmark::State& s) {
        held_over_replan(s, tiny_config(), 200);
    })->Unit(benchmark::kMillisecond)->Iterations(15);
    benchmark::RegisterBenchmark("decode/cpu/stories15m/held_over_replan", [](benchmark::State& s) {
        held_over_replan(s, stories15m_config(), 3);
    })->Unit(benchmark::kMillisecond)->Iterations(7);
    struct Dims {
        const char* name;
        ModelConfig config;
        double min_time;
    };
    for (const Dims& d : {Dims{"tiny", tiny_config(), 0.2}, Dims{"stories15m", stories15m_config(), 1.0}})
        for (Backend b : {Backend::cpu, Backend::cuda})
            for (auto [mode, mode_name] : {std::pair{Mode::held, "held"}, std::pair{Mode::rebind, "rebind"},
                                           std::pair{Mode::replan, "replan"}}) {
                const std::string name = std::string("decode/") + std::string(to_string(b)) + "/" + d.name + "/" + mode_name;
                benchmark::RegisterBenchmark(name.c_str(), [cfg = d.config, b, mode](benchmark::State& s) {
                    decode_loop(s, cfg, b, mode);
                })->Unit(benchmark::kMicrosecond)->MinTime(d.min_time);
            }
}

}  // namespace
}  // namespace kvweld

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    kvweld::register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
