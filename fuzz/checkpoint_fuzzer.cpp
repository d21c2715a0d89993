// The model loaders on arbitrary bytes (GGUF when they start with its
// magic, llama2.c's checkpoint otherwise): an Error or a model, never a
// crash. A model that loads must decode a token.
#include "engine/checkpoint.hpp"
#include "engine/decode_session.hpp"
#include "util/error.hpp"
#include "engine/gguf.hpp"

#include <cstring>

#include <cmath>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace kvweld;
    try {
        const auto bytes = std::as_bytes(std::span(data, size));
        const bool gguf = size >= 4 && std::memcmp(data, "GGUF", 4) == 0;
        const Model model = gguf ? parse_gguf(bytes, "<input>") : parse_llama2c(bytes);
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
