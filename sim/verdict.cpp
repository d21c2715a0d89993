#include "sim/verdict.hpp"

#include "util/cat.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"

namespace kvweld::sim {

namespace {
constexpr NameTable<Verdict, kVerdicts> kVerdictNames{{
    {Verdict::pass, "pass"},
    {Verdict::stale_decode, "stale_decode"},
    {Verdict::spurious_invalidation, "spurious_invalidation"},
    {Verdict::missed_invalidation, "missed_invalidation"},
    {Verdict::engine_error, "engine_error"},
    {Verdict::rows_differ, "rows_differ"},
    {Verdict::reuse_differs, "reuse_differs"},
}};
constexpr NameTable<Oracle, kOracles> kOracleNames{{
    {Oracle::data, "data"},
    {Oracle::kv, "kv"},
    {Oracle::weld, "weld"},
    {Oracle::accounting, "accounting"},
    {Oracle::ledger, "ledger"},
    {Oracle::engine, "engine"},
    {Oracle::blocks, "blocks"},
    {Oracle::twin, "twin"},
    {Oracle::peer, "peer"},
}};
}  // namespace

std::string_view to_string(Verdict v) { return name_in(kVerdictNames, v); }
Verdict verdict_from_string(std::string_view s) { return parse_in(kVerdictNames, s, "verdict"); }
std::string_view to_string(Oracle o) { return name_in(kOracleNames, o); }
Oracle oracle_from_string(std::string_view s) { return parse_in(kOracleNames, s, "oracle"); }

int exit_code(Verdict v) {
    switch (v) {
        case Verdict::pass: return 0;
        case Verdict::stale_decode: return 3;
        case Verdict::spurious_invalidation: return 4;
        case Verdict::missed_invalidation: return 5;
        case Verdict::engine_error: return 6;
        case Verdict::rows_differ: return 7;
        case Verdict::reuse_differs: return 8;
    }
    return 1;
}

}  // namespace kvweld::sim
