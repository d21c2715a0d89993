// A held decode plan: the prepared artifact a DecodeSession keeps between
// steps. It bakes its op structure and weights and is welded to the KV
// storage it was built (or last rebound) against: it reads and writes those
// buffers whatever cache it is handed later. Only per-token data is rebound
// on every step.
#pragma once

#include "engine/adapters.hpp"
#include "engine/ids.hpp"
#include "engine/kv_cache.hpp"
#include "engine/kv_pool.hpp"
#include "engine/plan_key.hpp"

#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace kvweld {

// Per-token data, rebound on every step.
struct StepParams {
    int token = 0;
    int pos = 0;       // KV write offset and RoPE row
    int mask_len = 0;  // attention length: pos + 1
    // Paged KV: the sequence's block table (position p is in blocks[p / B]);
    // empty for a dense cache.
    std::span<const int> blocks = {};
    // The adapters' step data: each LoRA adapter's scale and the control
    // vector (the adapter set itself is in the key). nullptr: none.
    const Adapters* adapters = nullptr;
};

// The adapters' step data as a plan built with `baked` adapters (its set)
// and `cvec_at_build` applies it, one rule for every backend: the scale of
// its adapter i is the step's for the same adapter; the build's under the
// lora_scale_baked fault, or when the step's set is another (only a plan
// the adapter_set_not_in_key fault kept meets one). The control vector is
// the step's; the build's under the cvec_baked fault.
float step_lora_factor(std::span<const LoraUse> baked, std::size_t i, const StepParams& step);
const ControlVector* step_cvec(const std::optional<ControlVector>& cvec_at_build, const StepParams& step);

// Throws Error unless every layer fits a plan with this key and KV width;
// backends call it before changing anything (rebind is all or nothing).
void require_rebind_compatible(std::span<const KvLayer> layers, const PlanKey& key, int kv_dim);

class Plan {
public:
    virtual ~Plan() = default;

    // Moves the plan onto other KV buffers of the same geometry, all or
    // nothing: every layer is checked before any is changed; on Error the
    // plan is untouched.
    virtual void rebind(std::span<const KvLayer> layers) = 0;
    // A paged plan: moves onto the pool's current storage (after a grow or
    // reset). Others throw Error.
    virtual void rebind_pool(const KvPool& pool);
    // Runs one decode step; the logits stay valid until the next call.
    virtual std::span<const float> run(const StepParams& step) = 0;
    // Runs one sequence's steps of a call, positions in order. each(i,
    // logits) is called once step i's logits (and hidden()) are final,
    // valid during the call. causal: step by step, as run(). Not causal
    // (llama.h's llama_set_causal_attn(ctx, false)): layer by layer, every
    // step attending to the positions up to the last step's; a backend
    // without that path (CUDA) throws Error for more than one step.
    using StepRows = std::function<void(std::size_t, std::span<const float>)>;
    virtual void run_span(std::span<const StepParams> steps, bool causal, const StepRows& each);
    // The storage serials of the KV buffers the plan is bound to.
    virtual std::vector<StorageSerial> bound_serials() const = 0;
    // Runs later steps on `threads` threads (1..256, the caller's included).
    // Step data: the rows do not depend on it (a backend without CPU
    // threads ignores it).
    virtual void set_threads(int /*threads*/) {}
    // The last step's hidden state after the final norm (dim floats: what
    // the classifier reads, llama.cpp's embeddings with pooling none),
    // valid until the next call. Under the embeddings_baked fault, the one
    // of the first step it was read for, as from an output buffer bound at
    // build and never rewritten.
    std::span<const float> hidden() const;

    const PlanKey& key() const { return key_; }
    void set_key(const PlanKey& key) { key_ = key; }
    PlanSerial serial() const { return serial_; }

protected:
    virtual std::span<const float> read_hidden() const = 0;  // the backend's
    PlanKey key_;

private:
    PlanSerial serial_ = PlanSerial::mint();
    mutable std::vector<float> hidden_at_build_;  // read only under the embeddings_baked fault
};

}  // namespace kvweld
