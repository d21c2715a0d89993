// Random calls with out-of-range arguments on a cache and a session. Every
// bad call must throw kvweld::Error and leave all state unchanged; every
// good call must keep the contract (truncate keeps the id, clear and
// set_layer mint a new one).
#include "engine/decode_session.hpp"
#include "util/error.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>

using namespace kvweld;

namespace {

struct Snapshot {
    int cached_len;
    KvAllocId alloc;
    std::vector<StorageSerial> storage, bound;
    std::uint64_t decodes;
    bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const KvCache& cache, const DecodeSession& session) {
    return {cache.cached_len(), cache.alloc_id(), cache.storage_serials(), session.bound_serials(),
            session.counters().decodes()};
}

[[noreturn]] void die(const char* what) {
    std::fprintf(stderr, "api_fuzzer: %s\n", what);
    std::abort();
}

// Small enough that every accepted shape allocates in microseconds.
int small_int(FuzzedDataProvider& in) { return in.ConsumeIntegralInRange(-3, 40); }

// One call; returns what the contract says about the id if it succeeds.
enum class IdRule { any, same, new_id };

IdRule call(FuzzedDataProvider& in, const Model& model, KvCache& cache, DecodeSession& session) {
    const ModelConfig& c = model.config();
    switch (in.ConsumeIntegralInRange(0, 6)) {
        case 0: session.decode(model, cache, in.ConsumeIntegralInRange(-2, c.vocab + 2)); return IdRule::same;
        case 1: cache.truncate_to(in.ConsumeIntegralInRange(-2, cache.cached_len() + 2)); return IdRule::same;
        case 2: {
            const int seq = in.ConsumeBool() ? c.max_seq_len : small_int(in);
            const int width = in.ConsumeBool() ? c.kv_dim() : small_int(in);
            if (seq <= 0 || width <= 0) throw Error("skip: a storage needs positive dims");
            cache.set_layer(in.ConsumeIntegralInRange(-1, c.n_layers), std::make_shared<KvStorage>(seq, width));
            return IdRule::new_id;
        }
        case 3: cache.clear(); return IdRule::new_id;
        case 4: {  // a cache of another shape must be refused
            KvGeometry g = KvGeometry::of(c);
            g.n_layers = in.ConsumeIntegralInRange(1, 4);
            g.n_kv_heads = in.ConsumeIntegralInRange(1, 4);
            g.max_seq_len = in.ConsumeIntegralInRange(1, 300);
            auto other = KvCache::with_capacity(g);
            DecodeSession probe = DecodeSession();
            probe.decode(model, other, 0);
            return IdRule::any;
        }
        case 5: session.check(model, cache); return IdRule::any;
        default: {
            // Each dim small or anywhere in int: every size past the limit
            // must be refused before anything is allocated; of the rest,
            // only small ones are built (a fuzz input must stay fast).
            auto dim = [&] { return in.ConsumeBool() ? small_int(in) : in.ConsumeIntegral<int>(); };
            const KvGeometry g{dim(), dim(), dim(), dim(), Dtype::f32};
            const bool positive = g.n_layers > 0 && g.n_kv_heads > 0 && g.head_dim > 0 && g.max_seq_len > 0;
            const double bytes = 8.0 * g.n_layers * g.n_kv_heads * g.head_dim * g.max_seq_len;
            if (positive && bytes <= double(kMaxCacheBytes) && bytes > 1 << 20) return IdRule::any;
            KvCache::with_capacity(g);
            if (!(positive && bytes <= double(kMaxCacheBytes))) die("an impossible or oversized cache was accepted");
            return IdRule::any;
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const Model model = [] {
        ModelConfig c = tiny_config();
        c.max_seq_len = 16;
        return Model::random(c, 1);
    }();
    FuzzedDataProvider in(data, size);
    KvCache cache = KvCache::with_capacity(model.config());
    DecodeSession session;
    for (int i = 0; i < 64 && in.remaining_bytes() > 0; ++i) {
        const Snapshot before = snapshot(cache, session);
        try {
            const IdRule rule = call(in, model, cache, session);
            if (rule == IdRule::same && cache.alloc_id() != before.alloc) die("the id changed on a same-id call");
            if (rule == IdRule::new_id && cache.alloc_id() == before.alloc) die("the id did not change");
        } catch (const Error&) {
            if (!(snapshot(cache, session) == before)) die("a refused call changed state");
        }
    }
    return 0;
}
