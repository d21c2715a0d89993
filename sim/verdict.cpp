#include "sim/verdict.hpp"

#include "util/cat.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"

#include <cctype>

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
    {Oracle::fresh, "fresh"},
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

std::string message_kind(std::string_view detail) {
    std::string out;
    for (std::size_t i = 0; i < detail.size();) {
        const char c = detail[i];
        const bool sign = (c == '-' || c == '+') && i + 1 < detail.size() && std::isdigit(static_cast<unsigned char>(detail[i + 1])) &&
                          (i == 0 || !std::isalnum(static_cast<unsigned char>(detail[i - 1])));
        if (!sign && !std::isdigit(static_cast<unsigned char>(c))) {
            out += c;
            ++i;
            continue;
        }
        // A number: sign, digits, a fraction, an exponent.
        i += sign;
        while (i < detail.size() && (std::isdigit(static_cast<unsigned char>(detail[i])) || detail[i] == '.' ||
                                     ((detail[i] == 'e' || detail[i] == 'E') && i + 1 < detail.size() &&
                                      (std::isdigit(static_cast<unsigned char>(detail[i + 1])) || detail[i + 1] == '-'))))
            i += detail[i] == 'e' || detail[i] == 'E' ? 2 : 1;
        out += 'N';
    }
    // One N for a list or range of numbers ("N, N, N", "N..N").
    for (std::size_t at; (at = out.find("N, N")) != std::string::npos || (at = out.find("N..N")) != std::string::npos;)
        out.erase(at + 1, 3);
    return out;
}

FailureIdentity identity_of(Verdict v, const Failure* f) {
    if (!f) return {v, Oracle::data, {}, {}};
    return {v, f->oracle, f->clause, message_kind(f->detail)};
}

std::string to_string(const FailureIdentity& id) {
    return cat(to_string(id.verdict), " by the ", to_string(id.oracle), " oracle",
               id.clause.empty() ? "" : cat(", clause ", id.clause), ": \"", id.kind, "\"");
}

}  // namespace kvweld::sim

