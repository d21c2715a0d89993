// The llama2.c checkpoint loader on arbitrary bytes: an Error or a model,
// never a crash. A model that loads must decode a token.
#include "engine/checkpoint.hpp"
#include "engine/decode_session.hpp"
#include "engine/error.hpp"

#include <cmath>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace kvweld;
    try {
        const Model model = parse_llama2c(std::as_bytes(std::span(data, size)));
        KvGeometry g = KvGeometry::of(model.config());
        g.max_seq_len = std::min(g.max_seq_len, 4);
        auto cache = KvCache::with_capacity(g);
        DecodeSession session;
        const std::span<const float> logits = session.decode(model, cache, 0);
        if (logits.size() != static_cast<std::size_t>(model.config().vocab)) std::abort();
    } catch (const Error&) {
    }
    return 0;
}
