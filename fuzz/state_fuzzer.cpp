// A sequence state import on arbitrary bytes, for kvweld's engine (in
// process and as its plugin) and llama.cpp (its plugin, where the build has
// it, in each KV layout): the first byte picks the engine, the rest are the
// state. A refusal
// is an Error and the sequence keeps what it held: its next row still
// agrees with the reference. An accepted state decodes finite rows on
// kvweld's engine (its import refuses non-finite values; llama.cpp checks
// none, so only that it does not crash). Input that starts with the
// engine's own magic gets the engine's model digest (bytes 8..16 in both
// formats), so the fuzzer reaches past the identity check into the reader.
//
// One refusal is a known finding of llama.cpp (0.3.36 and the pinned
// b11434), not a crash: a state with a negative cell position is placed
// unchecked (state_read_meta, src/llama-kv-cache.cpp:2379-2408 in b11434)
// and no seq_rm can remove that cell again (seq_rm clamps p0 to 0, line
// 409), so the sequence is not what it
// held. The plugin's refusal says so; the fuzzer names the finding once and
// opens the engine afresh, and aborts on any other changed sequence.
#include "util/error.hpp"
#include "engine/reference.hpp"
#include "targets/registry.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace kvweld;

// The engines and their settings, picked by the input's first byte (mod 4).
struct EngineChoice {
    const char* name;
    const char* params;
};
constexpr std::array kEngines = {EngineChoice{"inproc", ""}, EngineChoice{"kvweld", ""},
                                 EngineChoice{"llamacpp", ""}, EngineChoice{"llamacpp", "kv_unified=1"}};
constexpr int kHeld = 3;  // positions the sequence holds when the state comes

struct Target {
    Model model = Model::random(tiny_config(), 1);
    std::unique_ptr<targets::Engine> engine;
    std::vector<std::uint8_t> own_state;  // a good state, for its magic and digest
    std::vector<float> next_row;          // the reference's row for the token after the held ones
};

bool available(const char* engine) {
    const targets::EngineEntry* e = targets::engine_entry(engine);
    return e && (e->in_process || (*e->plugin && std::filesystem::exists(e->plugin)));
}

std::unique_ptr<Target> open_target(const EngineChoice& choice) {
    if (!available(choice.name)) return nullptr;
    auto t = std::make_unique<Target>();
    t->engine = targets::open_engine(choice.name, "", {choice.params, 2, 16, 1}, t->model);
    ReferenceKv kv(t->model.config());
    for (int pos = 0; pos < kHeld; ++pos) reference_forward(t->model, kv, pos + 1, pos);
    t->next_row = reference_forward(t->model, kv, 7, kHeld);
    t->engine->apply(targets::calls::Open{0});
    t->engine->apply(targets::calls::Open{1});
    const std::vector<std::int32_t> seqs(kHeld, 1), tokens = {1, 2, 3};
    t->engine->decode(seqs, tokens);
    t->own_state = t->engine->state_save(1);
    return t;
}

// The llama.cpp plugin's words for the known finding (see the top).
bool known_stuck_cell(const std::string& error) {
    return error.find("that llama_memory_seq_rm cannot remove") != std::string::npos;
}

[[noreturn]] void fail(const char* engine, const char* what) {
    std::fprintf(stderr, "state_fuzzer (%s): %s\n", engine, what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static std::array<std::unique_ptr<Target>, kEngines.size()> targets = [] {
        std::array<std::unique_ptr<Target>, kEngines.size()> out;
        for (std::size_t i = 0; i < kEngines.size(); ++i) out[i] = open_target(kEngines[i]);
        return out;
    }();
    if (size < 1) return 0;
    const std::size_t pick = data[0] % kEngines.size();
    Target* t = targets[pick].get();
    if (!t) return 0;
    const char* name = kEngines[pick].name;
    std::vector<std::uint8_t> bytes(data + 1, data + size);
    if (bytes.size() >= 16 && std::memcmp(bytes.data(), t->own_state.data(), 4) == 0)
        std::copy_n(t->own_state.begin() + 8, 8, bytes.begin() + 8);
    targets::Engine& e = *t->engine;
    e.apply(targets::calls::ClearAll{});  // whatever an earlier input left (a cell no seq_rm removes) goes
    const std::vector<std::int32_t> seqs(kHeld, 0), tokens = {1, 2, 3};
    e.decode(seqs, tokens);
    bool accepted = true;
    std::string error;
    try {
        e.state_load(0, bytes);
    } catch (const Error& refused) {
        accepted = false;
        error = refused.what();
    }
    if (!accepted && known_stuck_cell(error)) {
        static const bool said = (std::fprintf(stderr, "state_fuzzer (%s): known llama.cpp finding "
                                                       "state-load-negative-position: %s\n", name, error.c_str()), true);
        (void)said;
        targets[pick] = open_target(kEngines[pick]);
        return 0;
    }
    if (!accepted) {  // nothing lost: the held positions decode on as before
        const std::vector<float> row = e.decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{7});
        if (!(logit_error(row, t->next_row) <= kDataTolerance)) fail(name, "a refused state changed the sequence");
        return 0;
    }
    try {
        const std::vector<float> row = e.decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{7});
        const bool finite = std::all_of(row.begin(), row.end(), [](float v) { return std::isfinite(v); });
        if (std::string(name) != "llamacpp" && !finite) fail(name, "an accepted state decodes non-finite logits");
    } catch (const Error&) {  // a state that fills the sequence: its decode is refused, by name
    }
    return 0;
}
