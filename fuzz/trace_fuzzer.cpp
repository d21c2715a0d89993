// The trace reader on arbitrary bytes: an Error or a valid trace, never a
// crash. A trace that parses must also print back to text that parses to
// the same ops.
#include "engine/error.hpp"
#include "sim/trace.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace kvweld;
    const std::string text(reinterpret_cast<const char*>(data), size);
    sim::Trace t;
    try {
        t = sim::parse_trace(text);
    } catch (const Error&) {
        return 0;
    }
    const std::string again = sim::trace_text(t.config, t.steps, t.ops);
    const sim::Trace round = sim::parse_trace(again);
    if (sim::trace_text(round.config, round.steps, round.ops) != again) std::abort();
    return 0;
}
