// The reuse study for an engine behind the ABI: the same kind of synthetic
// traffic as `kvweld traffic` (Poisson arrivals, prompt and output lengths,
// speculative drafts, preemption), served the way a continuous-batching
// server does: each tick admits what fits, retires what finished, preempts
// at random, then runs one batched step over every active sequence
// (prefill chunks and pending tokens with drafts); reloads the model and
// offloads/restores a layer (swap_layer) when the engine can. Every row is checked (data oracle) and
// every call's reuse judged by the engine's rule.
#pragma once

#include "sim/run.hpp"

#include <map>
#include <string>

namespace kvweld::sim {

// How a server switches between its requests' adapters: a set of the one
// adapter (none for the base model) before each call, or one set of every
// adapter whose scales select the call's (1 for it, 0 for the rest).
enum class AdapterSwitch : std::uint8_t { set, scales };
std::string_view to_string(AdapterSwitch s);
AdapterSwitch adapter_switch_from_string(std::string_view s);  // throws Error naming s

// How the server schedules. churn: each tick admits what fits, preempts and
// offloads at random, and steps every sequence (prefill chunks and decodes
// with drafts): a batch of another shape almost every call. steady: as
// llama-server and vLLM do, every running sequence decodes every step with
// the same draft count, new requests enter by chunked prefill within a
// per-step token budget (decodes first), requests end by length or a stop
// token, and nothing is preempted but for memory (a paged pool's room):
// most steps repeat the last one's shape.
enum class TrafficMode : std::uint8_t { churn, steady };
std::string_view to_string(TrafficMode m);
TrafficMode traffic_mode_from_string(std::string_view s);  // throws Error naming s

// The traffic: simulated time (ticks), Poisson arrivals, prompt and output
// lengths from stated distributions, speculative decoding, preemption,
// offload/restore, model reloads.
struct TrafficParams {
    std::uint64_t seed = 1;
    int ticks = 400;
    int slots = 8;
    std::string model = "tiny";
    double arrival_rate = 0.5;  // requests per tick, Poisson
    int prompt_mean = 12;       // prompt length: uniform in [1, 2*mean-1]
    int output_mean = 24;       // output length: geometric with this mean, capped by capacity
    int spec_k = 4;             // 1 = no speculative decoding
    double accept = 0.6;        // per-draft acceptance probability
    double preempt_rate = 0.01; // per active request per tick: clear and re-prefill
    double offload_rate = 0.01; // per active request per tick: a layer swapped out and back in
    double reload_rate = 0.002; // per tick: the model is reloaded (same shape)
    double reload_new_weights = 0.5;
    // White box: a request is admitted onto the storage its slot kept from
    // the last one, rewound (a server that recycles caches), where it kept some.
    bool recycle = false;
    // Per-request LoRA adapters, the way a server serves several: each
    // request uses one of `adapters` (0..kLoraPool) or the base model,
    // uniformly; a tick's step runs one engine call per adapter in use, the
    // adapters set before each (engines with KVWELD_CAP_LORA).
    int adapters = 0;
    AdapterSwitch adapter_switch = AdapterSwitch::set;
    TrafficMode mode = TrafficMode::churn;
    // steady: the tokens one step may carry (decodes first, then as much of
    // each waiting prompt as is left, in arrival order: --chunk is churn's); lengths log-normal (heavy-tailed) around
    // the means, an output also ending at a stop token (one chance in
    // 2 x output_mean per token); no random preemption, offload or reload.
    int token_budget = 256;
};

// Steady mode's lengths when not given: serving-like means, heavy-tailed,
// within the 256 positions the swarm's models hold.
// And arrivals a little under what 8 sequences serve (a request holds a
// sequence about 60 steps), so the batch stays full and changes seldom.
inline constexpr int kSteadyPromptMean = 96, kSteadyOutputMean = 128;
inline constexpr double kSteadyArrivalRate = 0.1;

// A paged engine's pool under the traffic (engines with a block model).
struct PoolStats {
    bool paged = false;
    int block_size = 0, start_blocks = 0, end_blocks = 0, grows = 0;
    double utilisation = 0.0;          // mean over steps of blocks in use / blocks
    std::uint64_t preemptions = 0;     // every preemption: the traffic's own and the pool's
    std::uint64_t pool_preemptions = 0;  // of those, to make room in the pool
    std::uint64_t waits = 0;           // admissions put off for lack of blocks (per tick)
};

// "block 16, 64 -> 128 blocks (1 grow), utilisation 0.61, 12 preemptions (5 for pool room), 30 admissions put off"
std::string describe(const PoolStats& pool);

struct TrafficResult {
    RunResult run;
    double decode_seconds = 0.0;  // wall time inside the engine's decode calls
    std::map<std::string, ShapeStats> shapes;
    PoolStats pool;
};

// `chunk`: prefill tokens per sequence per step. With a paged engine the
// server schedules against its pool, as vLLM does: a request is admitted
// only when its prompt's blocks are free, and a step that would need more
// blocks than are free first preempts the most recently admitted requests
// (their blocks freed, re-prefilled later); only a lone request that still
// does not fit makes the engine grow its pool.
TrafficResult run_traffic(const TrafficParams& traffic, const EngineChoice& engine, int chunk);

// What one plan (graph) build costs, in seconds: the same one-token decode
// (then truncated back, so the shape never changes), `calls` times, on an
// engine that reuses its plan and on its twin that builds every time
// (`no_reuse`), best of `repeat`; the difference per call. Checks with the
// counters that the first engine reused every call after the first and
// the second none; throws Error otherwise.
double measure_build_seconds(const EngineChoice& reuse, const EngineChoice& no_reuse, const std::string& model,
                             int calls = 200, int repeat = 5);

}  // namespace kvweld::sim
