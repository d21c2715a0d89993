// The trace reader on arbitrary bytes: an Error or a valid trace, never a
// crash. A trace that parses must also print back to text that parses to
// the same ops.
#include "util/error.hpp"
#include "sim/run.hpp"

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
    const auto text_of = [](const sim::Trace& s) {
        return sim::trace_text(sim::RunResult{s.config, s.steps, s.ops, {}, {}, sim::Verdict::pass, {}});
    };
    const std::string again = text_of(t);
    if (text_of(sim::parse_trace(again)) != again) std::abort();
    return 0;
}
