// The paged KV pool against an abstract model of block ownership, over
// random command sequences (CI fixes the seed through RC_PARAMS): admit,
// append, truncate, fork, retire, compact, grow, reset. After every command:
//   1. each block's reference count equals the number of live block tables
//      holding it, and the free blocks are exactly those held by none;
//   2. every position of every sequence reads back the value written there
//      (forks see their prefix; no write shows through another's table);
//   3. the pool id changes on grow and reset and on nothing else.
// The other half: under each of the pool's fault switches the property
// fails (RapidCheck finds and prints a counterexample).
#include "engine/faults.hpp"
#include "engine/kv_pool.hpp"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <iostream>
#include <vector>

namespace kvweld::props {
namespace {

enum class PoolCmd { admit, append, truncate, fork, retire, compact, grow, reset };

struct Cmd {
    PoolCmd kind;
    unsigned pick, count;
};

struct Seq {
    PagedSequence kv;
    std::vector<float> values;  // the model: what each position must hold
};

void write(KvPool& pool, Seq& s, float value) {
    const auto [b, o] = s.kv.locate(pool, s.kv.length() - 1);
    for (int l = 0; l < pool.n_layers(); ++l)
        for (int i = 0; i < pool.kv_dim(); ++i) pool.key(l, b, o)[i] = pool.value(l, b, o)[i] = value;
    s.values.push_back(value);
}

void check(const KvPool& pool, const std::vector<Seq>& seqs) {
    std::vector<const PagedSequence*> tables;
    for (const Seq& s : seqs) tables.push_back(&s.kv);
    const std::optional<std::string> violation = block_ledger_violation(pool, tables);
    RC_ASSERT(!violation.has_value());
    for (const Seq& s : seqs) {
        RC_ASSERT(s.kv.length() == int(s.values.size()));
        for (int p = 0; p < s.kv.length(); ++p) {
            const auto [b, o] = s.kv.locate(pool, p);
            RC_ASSERT(*pool.key(0, b, o) == s.values[std::size_t(p)]);
            RC_ASSERT(*pool.value(pool.n_layers() - 1, b, o) == s.values[std::size_t(p)]);
        }
    }
}

void pool_property() {
    const int block = 1 << *rc::gen::inRange(0, 4);  // 1..8
    KvPool pool(KvGeometry{.n_layers = 2, .n_kv_heads = 1, .head_dim = 2}, block, *rc::gen::inRange(1, 12));
    const auto cmds = *rc::gen::container<std::vector<Cmd>>(rc::gen::build<Cmd>(
        rc::gen::set(&Cmd::kind, rc::gen::element(PoolCmd::admit, PoolCmd::append, PoolCmd::append, PoolCmd::truncate,
                                                  PoolCmd::fork, PoolCmd::retire, PoolCmd::compact, PoolCmd::grow,
                                                  PoolCmd::reset)),
        rc::gen::set(&Cmd::pick, rc::gen::inRange(0u, 1000u)), rc::gen::set(&Cmd::count, rc::gen::inRange(0u, 12u))));
    std::vector<Seq> seqs;
    float next_value = 1.0f;
    for (const Cmd& c : cmds) {
        const KvAllocId id = pool.alloc_id();
        Seq* s = seqs.empty() ? nullptr : &seqs[c.pick % seqs.size()];
        switch (c.kind) {
            case PoolCmd::admit: seqs.emplace_back(); s = &seqs.back(); [[fallthrough]];
            case PoolCmd::append:
                for (unsigned i = 0; s && i < c.count; ++i) {
                    if (!s->kv.append(pool)) break;  // exhausted: nothing changed
                    write(pool, *s, next_value++);
                }
                break;
            case PoolCmd::truncate:
                if (!s) break;
                s->kv.truncate_to(pool, int(c.count % (s->values.size() + 1)));
                s->values.resize(std::size_t(s->kv.length()));
                break;
            case PoolCmd::fork:
                if (s) seqs.push_back(Seq{s->kv.fork(pool), s->values});
                break;
            case PoolCmd::retire:
                if (!s) break;
                s->kv.release_all(pool);
                seqs.erase(seqs.begin() + long(c.pick % seqs.size()));
                break;
            case PoolCmd::compact: {
                std::vector<PagedSequence*> live;
                for (Seq& q : seqs) live.push_back(&q.kv);
                pool.compact(live);
                break;
            }
            case PoolCmd::grow: pool.grow(pool.n_blocks() + 1 + int(c.count % 4)); break;
            case PoolCmd::reset:
                pool.reset();
                seqs.clear();
                break;
        }
        const bool replaced = c.kind == PoolCmd::grow || c.kind == PoolCmd::reset;
        RC_ASSERT((pool.alloc_id() != id) == replaced);
        check(pool, seqs);
    }
}


}  // namespace

RC_GTEST_PROP(PoolProps, OwnershipContentAndIdentityHoldForEveryCommandSequence, ()) { pool_property(); }

// The pool's faults (the plan's stale_block_table is the serving
// simulator's to catch: the pool cannot see a plan).
class PoolPropsUnderFault : public ::testing::TestWithParam<Fault> {};

TEST_P(PoolPropsUnderFault, FindACounterexample) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    FaultSet faults;
    faults.add(GetParam());
    ScopedFaults scoped(faults);
    rc::detail::TestMetadata metadata;
    metadata.id = metadata.description = "pool under " + std::string(to_string(GetParam()));
    const rc::detail::TestResult result = rc::detail::checkTestable([] { pool_property(); }, metadata);
    rc::detail::printResultMessage(result, std::cout);
    std::cout << "\n";
    rc::detail::FailureResult failure;
    EXPECT_TRUE(result.match(failure)) << "the pool property did not notice " << to_string(GetParam());
}

INSTANTIATE_TEST_SUITE_P(PoolFaults, PoolPropsUnderFault,
                         ::testing::Values(Fault::freed_block_in_table, Fault::cow_skipped, Fault::grow_keeps_id,
                                           Fault::compact_skips_table, Fault::refcount_off_by_one),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace kvweld::props
