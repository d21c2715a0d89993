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
    // The storage serials of the KV buffers the plan is bound to.
    virtual std::vector<StorageSerial> bound_serials() const = 0;

    const PlanKey& key() const { return key_; }
    void set_key(const PlanKey& key) { key_ = key; }
    PlanSerial serial() const { return serial_; }

protected:
    PlanKey key_;

private:
    PlanSerial serial_ = PlanSerial::mint();
};

}  // namespace kvweld
