// The trace readers on arbitrary bytes, both kinds (kvweld's own and the
// serving simulator's, told apart by the header): an Error or a valid
// trace, never a crash. A trace that parses must also print back to text
// that parses to the same ops.
#include "engine/error.hpp"
#include "sim/serve/serve_run.hpp"
#include "sim/trace.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace kvweld;
    const std::string text(reinterpret_cast<const char*>(data), size);
    if (sim::is_serve_trace(text)) {
        sim::ServeTrace t;
        try {
            t = sim::parse_serve_trace(text);
        } catch (const Error&) {
            return 0;
        }
        const auto text_of = [](const sim::ServeTrace& s) {
            return sim::serve_trace_text(sim::ServeResult{s.config, s.steps, s.ops, {}, {}, sim::Verdict::pass, {}});
        };
        const std::string again = text_of(t);
        if (text_of(sim::parse_serve_trace(again)) != again) std::abort();
        return 0;
    }
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
