// How a run ended, and which oracle said so. Each failure class has its own
// process exit code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvweld::sim {

enum class Verdict : std::uint8_t {
    pass,
    stale_decode,           // data, kv, weld, blocks or twin oracle
    spurious_invalidation,  // the engine prepared a plan no change justified
    missed_invalidation,    // a justified rebuild/rebind did not happen, output still right
    engine_error,           // the engine refused a valid op, or its reports contradict each other
    // kvweld diff (a peer engine in lockstep): which of the two is wrong is
    // not for the diff to say, only that they differ.
    rows_differ,    // a row of the engine's differs from the peer's beyond the tolerance
    reuse_differs,  // a call where one of the two reused a plan and the other prepared one
};
inline constexpr int kVerdicts = 7;

// engine: the engine refused a valid op; ledger: a cache broke the storage
// contract (StorageLedger, sim/oracle_weld.cpp); blocks: a paged engine's block tables and
// counts broke the block ledger (targets/block_model.hpp); the rest are
// the per-decode oracles.
// twin: a row differs from the one the engine's twin (reuse off) returned;
// peer: kvweld diff's comparison with another engine run in lockstep.
enum class Oracle : std::uint8_t { data, kv, weld, accounting, ledger, engine, blocks, twin, peer, fresh };
inline constexpr int kOracles = 10;

std::string_view to_string(Verdict v);
std::string_view to_string(Oracle o);
Oracle oracle_from_string(std::string_view s);  // throws Error naming s
Verdict verdict_from_string(std::string_view s);  // throws Error naming s

// 0 pass; 3 stale decode; 4 spurious; 5 missed; 6 engine error; 7 rows
// differ; 8 reuse differs. (1 is a swarm or diff with failures, 2 a usage
// or input error.)
int exit_code(Verdict v);

struct Failure {
    std::size_t op_index = 0;
    std::string op;  // its kind
    Oracle oracle = Oracle::data;
    std::string detail;
    // Accounting: the reuse rule's contract clause that decided the
    // failing call, where it names one (sim/known_findings.hpp matches on it).
    std::string clause = {};
};

// A failure's identity, the way syzkaller keeps a crash's title: the
// verdict, the oracle that saw it, the contract clause, and the kind of
// message (its text with every number written N and every list of numbers
// one N). A shrink keeps it, so a minimized trace is the same bug, never
// another one of the same class met on the way.
struct FailureIdentity {
    Verdict verdict = Verdict::pass;
    Oracle oracle = Oracle::data;
    std::string clause, kind;
    bool operator==(const FailureIdentity&) const = default;
};
FailureIdentity identity_of(Verdict v, const Failure* f);
std::string message_kind(std::string_view detail);
std::string to_string(const FailureIdentity& id);

}  // namespace kvweld::sim
