#include "sim/verdict.hpp"

#include "engine/cat.hpp"
#include "engine/error.hpp"

namespace kvweld::sim {

std::string_view to_string(Verdict v) {
    switch (v) {
        case Verdict::pass: return "pass";
        case Verdict::stale_decode: return "stale_decode";
        case Verdict::spurious_invalidation: return "spurious_invalidation";
        case Verdict::missed_invalidation: return "missed_invalidation";
        case Verdict::engine_error: return "engine_error";
    }
    return "?";
}

Verdict verdict_from_string(std::string_view s) {
    for (Verdict v : {Verdict::pass, Verdict::stale_decode, Verdict::spurious_invalidation,
                      Verdict::missed_invalidation, Verdict::engine_error})
        if (to_string(v) == s) return v;
    throw Error(cat("unknown verdict '", s, "'"));
}

std::string_view to_string(Oracle o) {
    switch (o) {
        case Oracle::data: return "data";
        case Oracle::kv: return "kv";
        case Oracle::ledger: return "ledger";
        case Oracle::weld: return "weld";
        case Oracle::accounting: return "accounting";
        case Oracle::engine: return "engine";
    }
    return "?";
}

int exit_code(Verdict v) {
    switch (v) {
        case Verdict::pass: return 0;
        case Verdict::stale_decode: return 3;
        case Verdict::spurious_invalidation: return 4;
        case Verdict::missed_invalidation: return 5;
        case Verdict::engine_error: return 6;
    }
    return 1;
}

}  // namespace kvweld::sim
