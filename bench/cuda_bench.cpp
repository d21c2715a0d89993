// CUDA plan costs per token, on the device: graph replay (the held plan),
// rebind (rewriting KV node parameters), capture + instantiate alone (what
// a plan without rebind pays per allocation change), a whole plan build,
// and plain stream launches without a graph; plus the device-to-device copy
// bandwidth, for the memory-bandwidth floor of a decode step.
// Prints a table and writes JSON (--json FILE).
#include "engine/cuda/cuda_plan.hpp"
#include "engine/cuda/device_buffer.hpp"
#include "engine/decode_session.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

using namespace kvweld;
using namespace kvweld::cuda;

namespace {

using Clock = std::chrono::steady_clock;

// Median-free and simple: mean seconds per call over `n` calls after `warm`.
double per_call(int warm, int n, const std::function<void(int)>& fn) {
    for (int i = 0; i < warm; ++i) fn(i);
    const auto start = Clock::now();
    for (int i = 0; i < n; ++i) fn(warm + i);
    return std::chrono::duration<double>(Clock::now() - start).count() / n;
}

// Device-to-device copy bandwidth in bytes/s, counting bytes read plus written.
double copy_bandwidth() {
    const std::size_t bytes = std::size_t{1} << 30;
    DeviceBuffer<char> a(bytes), b(bytes);
    KVWELD_CUDA_CHECK(cudaMemset(a.get(), 1, bytes));
    cudaEvent_t start, stop;
    KVWELD_CUDA_CHECK(cudaEventCreate(&start));
    KVWELD_CUDA_CHECK(cudaEventCreate(&stop));
    KVWELD_CUDA_CHECK(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
    const int reps = 10;
    KVWELD_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < reps; ++i) KVWELD_CUDA_CHECK(cudaMemcpy(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
    KVWELD_CUDA_CHECK(cudaEventRecord(stop));
    KVWELD_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    KVWELD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return 2.0 * double(bytes) * reps / (ms / 1e3);
}

std::vector<KvLayer> layers_of(const KvCache& c) {
    std::vector<KvLayer> out;
    for (int l = 0; l < c.n_layers(); ++l) out.push_back(c.layer(l));
    return out;
}

nlohmann::json measure(const std::string& name, const ModelConfig& config, double bandwidth) {
    const Model model = Model::random(config, 1);
    auto cache = KvCache::with_capacity(config);
    auto other = KvCache::with_capacity(config);
    const int len = std::min(config.max_seq_len, 256);
    auto step = [&](int i) { return StepParams{i % config.vocab, i % len, i % len + 1}; };

    CudaPlan held(model, cache, CudaPlan::Mode::graph);
    const double replay = per_call(20, 200, [&](int i) { held.run(step(i)); });

    const std::vector<KvLayer> a = layers_of(cache), b = layers_of(other);
    const double rebind = per_call(10, 200, [&](int i) { held.rebind(i % 2 ? a : b); });
    const double rebind_step = per_call(10, 100, [&](int i) {
        held.rebind(i % 2 ? a : b);
        held.run(step(i));
    });

    CudaPlan stream(model, cache, CudaPlan::Mode::stream);
    const double plain = per_call(10, 100, [&](int i) { stream.run(step(i)); });

    // Capture + instantiate alone, comparable with other engines' published
    // graph re-capture costs; then a whole plan build (buffers, pinned
    // memory, RoPE table, capture) for contrast.
    const double recapture = per_call(2, 50, [&](int) { held.recapture(); });
    const double build = per_call(2, 20, [&](int i) {
        CudaPlan fresh(model, cache, CudaPlan::Mode::graph);
        fresh.run(step(i));
    });

    const double weight_bytes = double(DeviceModel::of(model)->bytes());
    const double floor = weight_bytes / bandwidth;
    return {{"config", name},
            {"weight_bytes", weight_bytes},
            {"graph_nodes", held.graph_nodes()},
            {"replay_us", replay * 1e6},
            {"rebind_us", rebind * 1e6},
            {"rebind_plus_step_us", rebind_step * 1e6},
            {"capture_instantiate_us", recapture * 1e6},
            {"build_plus_step_us", build * 1e6},
            {"stream_launch_us", plain * 1e6},
            {"bandwidth_floor_us", floor * 1e6},
            {"replay_over_floor", replay / floor},
            {"replay_speedup_vs_stream", plain / replay},
            {"recapture_over_rebind", recapture / rebind},
            {"recapture_over_replay", recapture / replay}};
}

}  // namespace

int main(int argc, char** argv) {
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
            json_path = argv[++i];
        } else {
            std::fprintf(stderr, "usage: cuda_bench [--json FILE]\n"
                                 "CUDA plan costs per token (needs a GPU): graph replay, rebind, capture +\n"
                                 "instantiate, plan build, stream launches; a table, and JSON with --json\n");
            return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    try {
        require_device();
        cudaDeviceProp prop{};
        KVWELD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        const double bw = copy_bandwidth();
        nlohmann::json out = {{"device", prop.name}, {"copy_bandwidth_gbs", bw / 1e9}, {"configs", nlohmann::json::array()}};
        ModelConfig s15 = stories15m_config();
        ModelConfig m110 = config_110m();
        m110.max_seq_len = 256;
        for (const auto& [name, cfg] : {std::pair{"stories15m", s15}, std::pair{"110m", m110}})
            out["configs"].push_back(measure(name, cfg, bw));

        std::printf("device: %s, d2d copy bandwidth %.0f GB/s (read+write)\n", prop.name, bw / 1e9);
        std::printf("%-11s %9s %9s %9s %12s %10s %9s %9s %12s\n", "config", "replay_us", "floor_us", "rebind_us",
                    "capture_us", "build_us", "stream_us", "stream/rp", "capture/rebind");
        for (const auto& c : out["configs"])
            std::printf("%-11s %9.1f %9.1f %9.2f %12.1f %10.1f %9.1f %9.2f %12.1f\n",
                        c["config"].get<std::string>().c_str(), c["replay_us"].get<double>(),
                        c["bandwidth_floor_us"].get<double>(), c["rebind_us"].get<double>(),
                        c["capture_instantiate_us"].get<double>(), c["build_plus_step_us"].get<double>(),
                        c["stream_launch_us"].get<double>(), c["replay_speedup_vs_stream"].get<double>(),
                        c["recapture_over_rebind"].get<double>());
        if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
    } catch (const Error& e) {
        std::fprintf(stderr, "cuda_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
