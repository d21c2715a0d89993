// Random op sequences on a paged KV pool, with arguments from the whole int
// range: admit, append, truncate, fork, retire, compact, grow, reset, and raw
// retain/release/locate calls. A call with bad arguments must throw
// kvweld::Error and change nothing; after every call the block ledger
// (block_ledger_violation) must hold and every position must read back the
// value written there. A violation aborts with the reason.
#include "util/error.hpp"
#include "engine/kv_pool.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace kvweld;

namespace {

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "pool_fuzzer: %s\n", what.c_str());
    std::abort();
}

struct Seq {
    PagedSequence kv;
    std::vector<float> values;
};

void audit(const KvPool& pool, const std::vector<Seq>& seqs) {
    std::vector<const PagedSequence*> tables;
    for (const Seq& s : seqs) tables.push_back(&s.kv);
    if (const auto v = block_ledger_violation(pool, tables)) die(*v);
    for (const Seq& s : seqs)
        for (int p = 0; p < s.kv.length(); ++p) {
            const auto [b, o] = s.kv.locate(pool, p);
            if (*pool.value(pool.n_layers() - 1, b, o) != s.values[std::size_t(p)]) die("a position lost its value");
        }
}

// A call that must be refused: it throws Error and leaves the pool as it was.
template <class Fn>
void refused(const KvPool& pool, const std::vector<Seq>& seqs, Fn&& fn) {
    const int free = pool.free_blocks();
    try {
        fn();
    } catch (const Error&) {
        if (pool.free_blocks() != free) die("a refused call changed the free list");
        audit(pool, seqs);
        return;
    }
    die("a bad call was accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider in(data, size);
    const int block = 1 << in.ConsumeIntegralInRange(0, 4);
    KvPool pool(KvGeometry{.n_layers = 2, .n_kv_heads = 1, .head_dim = 2}, block, in.ConsumeIntegralInRange(1, 16));
    std::vector<Seq> seqs;
    float next_value = 1.0f;
    while (in.remaining_bytes() > 0) {
        const int op = in.ConsumeIntegralInRange(0, 10);
        const std::size_t pick = in.ConsumeIntegral<std::uint16_t>();
        Seq* s = seqs.empty() ? nullptr : &seqs[pick % seqs.size()];
        const KvAllocId id = pool.alloc_id();
        switch (op) {
            case 0: seqs.emplace_back(); s = &seqs.back(); [[fallthrough]];
            case 1:
                for (int i = in.ConsumeIntegralInRange(0, 20); s && i > 0; --i) {
                    if (!s->kv.append(pool)) break;
                    const auto [b, o] = s->kv.locate(pool, s->kv.length() - 1);
                    for (int l = 0; l < pool.n_layers(); ++l) *pool.value(l, b, o) = next_value;
                    s->values.push_back(next_value++);
                }
                break;
            case 2: {
                if (!s) break;
                const int n = in.ConsumeIntegral<int>();
                if (n < 0 || n > s->kv.length()) {
                    refused(pool, seqs, [&] { s->kv.truncate_to(pool, n); });
                } else {
                    s->kv.truncate_to(pool, n);
                    s->values.resize(std::size_t(n));
                }
                break;
            }
            case 3:
                if (s) seqs.push_back(Seq{s->kv.fork(pool), s->values});
                break;
            case 4:
                if (!s) break;
                s->kv.release_all(pool);
                seqs.erase(seqs.begin() + long(pick % seqs.size()));
                break;
            case 5: pool.grow(pool.n_blocks() + in.ConsumeIntegralInRange(1, 8)); break;
            case 6:
                pool.reset();
                seqs.clear();
                break;
            case 7: {  // raw calls on a block that is out of range or free: refused
                const int b = in.ConsumeIntegral<int>();
                if (b >= 0 && b < pool.n_blocks() && pool.refcount(b) > 0) break;
                refused(pool, seqs, [&] { pool.retain(b); });
                refused(pool, seqs, [&] { pool.release(b); });
                break;
            }
            case 8: {
                if (!s) break;
                const int pos = in.ConsumeIntegral<int>();
                if (pos < 0 || pos >= s->kv.length()) refused(pool, seqs, [&] { s->kv.locate(pool, pos); });
                break;
            }
            case 10: {  // compaction re-points every table; content and id stay
                std::vector<PagedSequence*> live;
                for (Seq& q : seqs) live.push_back(&q.kv);
                pool.compact(live);
                if (pool.alloc_id() != id) die("compaction changed the pool's id");
                break;
            }
            default: {  // a grow that is no grow, or past the size bound: refused before any allocation
                const int n = in.ConsumeIntegral<int>();
                const double bytes = 8.0 * pool.n_layers() * pool.kv_dim() * pool.block_size() * double(n);
                if (n <= pool.n_blocks() || bytes > double(kMaxCacheBytes)) refused(pool, seqs, [&] { pool.grow(n); });
                break;
            }
        }
        if ((pool.alloc_id() != id) != (op == 5 || op == 6)) die("the pool id changed without a grow or reset, or not with one");
        audit(pool, seqs);
    }
    return 0;
}
