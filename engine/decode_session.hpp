// DecodeSession: holds one plan and decides, on every decode, whether it
// may be reused (Valid), moved onto new buffers (AllocationChanged), or must
// be rebuilt (Stale). It counts every decision so a harness can compare the
// engine's behaviour with what was justified.
#pragma once

#include "engine/kv_cache.hpp"
#include "engine/kv_pool.hpp"
#include "engine/model.hpp"
#include "engine/plan.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvweld {

enum class Backend : std::uint8_t { cpu, cuda };
std::string_view to_string(Backend b);
Backend backend_from_string(std::string_view s);  // throws Error naming s

// What to do on AllocationChanged.
enum class RebindPolicy : std::uint8_t { rebind, rebuild };
std::string_view to_string(RebindPolicy p);
RebindPolicy rebind_policy_from_string(std::string_view s);  // throws Error naming s

struct SessionOptions {
    RebindPolicy policy = RebindPolicy::rebind;
    bool replan_every_token = false;  // for measurement only
    Backend backend = Backend::cpu;
    // CPU plan threads, 1..256, the caller's included; the plan owns its
    // workers. Logits are bitwise identical for every thread count.
    int threads = 1;
};


struct SessionCounters {
    std::uint64_t builds = 0;
    std::uint64_t rebinds = 0;
    std::uint64_t kept = 0;
    std::array<std::uint64_t, kBuildReasons> builds_by_reason{};

    std::uint64_t decodes() const { return builds + rebinds + kept; }
    std::uint64_t by(BuildReason r) const { return builds_by_reason[static_cast<int>(r)]; }
};

class DecodeSession {
public:
    explicit DecodeSession(SessionOptions options = {});
    ~DecodeSession();
    DecodeSession(DecodeSession&&) noexcept;
    DecodeSession& operator=(DecodeSession&&) noexcept;

    // Decodes `token` at position cache.cached_len(), writes its K/V into
    // the plan's bound storage, advances the cache, returns the logits
    // (valid until the next call). Bad input throws Error and changes nothing.
    // `adapters`: the LoRA adapters and control vector the decode runs with
    // (engine/adapters.hpp: the set is in the key, the rest step data).
    std::span<const float> decode(const Model& model, KvCache& cache, int token,
                                  const Adapters& adapters = Adapters::none());

    // One sequence's tokens of a call, at positions cache.cached_len().. in
    // order, through one plan: prepared once (counted as decode() counts),
    // its other tokens counted as kept. each(i, logits) gets token i's
    // logits (with plan()->hidden() its hidden state) during the call.
    // causal = false: every token attends to the whole span (Plan::run_span).
    // Bad input throws Error and changes nothing.
    void decode_span(const Model& model, KvCache& cache, std::span<const int> tokens, const Adapters& adapters,
                     bool causal, const Plan::StepRows& each);

    // Paged KV: decodes `token` for `seq` at position seq.length(), its row
    // appended to the sequence in `pool` (a new block, or a private copy of
    // a shared one). One session serves every sequence of a pool: the block
    // table is per-step data, so only a new pool storage (grow, reset) or a
    // new model moves the plan. A full pool is an Error naming it (nothing
    // changes): the caller frees, preempts or grows first.
    std::span<const float> decode(const Model& model, KvPool& pool, PagedSequence& seq, int token,
                                  const Adapters& adapters = Adapters::none());

    // What the held plan would be judged as for (model, cache), without acting.
    Validity check(const Model& model, const KvCache& cache, const Adapters& adapters = Adapters::none()) const;
    // ... and for (model, pool) at a sequence's next position.
    Validity check(const Model& model, const KvPool& pool, int position,
                   const Adapters& adapters = Adapters::none()) const;

    // The CPU plan's thread count for later decodes (1..256; Error names a
    // bad one and changes nothing). Step data: the held plan is kept, and its
    // rows do not change (llama.cpp's llama_set_n_threads keeps its graph too).
    void set_threads(int threads);

    bool has_plan() const { return plan_ != nullptr; }
    const Plan* plan() const { return plan_.get(); }
    void drop_plan() { plan_.reset(); }
    const SessionCounters& counters() const { return counters_; }
    const SessionOptions& options() const { return options_; }
    // The held plan's identity (0 without a plan): new on every build only.
    PlanSerial plan_serial() const { return plan_ ? plan_->serial() : PlanSerial{}; }
    // The storage serials the held plan is welded to (empty without a plan).
    std::vector<StorageSerial> bound_serials() const;

private:
    // What a plan is (re)built or rebound against: a dense cache or a pool.
    struct Target {
        const KvCache* cache = nullptr;
        const KvPool* pool = nullptr;
        int position = 0;
        const Adapters* adapters = nullptr;
    };
    void require_backend_adapters(const Adapters& adapters) const;
    void validate_input(const Model& model, const KvCache& cache, int token) const;
    void prepare(const Model& model, const PlanKey& now, const Target& target);
    void build(const Model& model, const Target& target, BuildReason reason);
    bool try_rebind(const PlanKey& now, const Target& target);

    SessionOptions options_;
    std::unique_ptr<Plan> plan_;
    SessionCounters counters_;
};

// Builds a plan for the backend (the CUDA one throws Error when unavailable).
std::unique_ptr<Plan> make_plan(Backend backend, const Model& model, const KvCache& cache, int threads = 1,
                                const Adapters& adapters = Adapters::none());
std::unique_ptr<Plan> make_cuda_plan(const Model& model, const KvCache& cache, const Adapters& adapters);
// A paged plan over `pool`, decoding next at `position` (the CUDA one
// throws Error when unavailable).
std::unique_ptr<Plan> make_paged_plan(Backend backend, const Model& model, const KvPool& pool, int position,
                                      int threads = 1, const Adapters& adapters = Adapters::none());
std::unique_ptr<Plan> make_cuda_paged_plan(const Model& model, const KvPool& pool, int position,
                                           const Adapters& adapters);
// Whether the CUDA backend can run here; `why` gets the reason when not.
bool cuda_backend_available(std::string* why = nullptr);

}  // namespace kvweld
