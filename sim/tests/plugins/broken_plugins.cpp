// Plugins that are broken on purpose, one per build (BROKEN_KIND), for the
// loader's error tests: a wrong ABI version, a missing function, a create
// that fails, a library without the entry symbol, a fault listed with a
// class that does not exist, a version 3 table declaring version 4's
// plan identity, live settings listed without set_live, and embeddings
// read back without the live setting that turns them on, an engine
// whose own live settings (ABI 13) go beyond its plugin's list; from ABI
// 14, a struct_size that does not reach past itself, keep declared
// without keep_seq and a rule shipped in part (kind 15); from ABI 15,
// settings given as data and as a text list (16) and a live setting with
// no values (17); and one that is not broken: a table newer than the host,
// with a capability the host does not know, which loads by its size.
#include "kvweld/engine_abi.h"

#include <cstring>

namespace {

int fail_create(const kvweld_engine_options*, [[maybe_unused]] kvweld_engine** out, char* err, size_t err_len) {
#if BROKEN_KIND == 11
    static int engine;  // an engine that is made, to be asked its live settings
    *out = reinterpret_cast<kvweld_engine*>(&engine);
    return 0;
#endif
    std::strncpy(err, "no model here: this plugin always fails", err_len - 1);
    err[err_len - 1] = '\0';
    return 7;
}
void destroy(kvweld_engine*) {}
[[maybe_unused]] int32_t vocab(const kvweld_engine*) { return 1; }
int seq_op(kvweld_engine*, int32_t, char*, size_t) { return 0; }
int decode(kvweld_engine*, const int32_t*, const int32_t*, int32_t, float*, char*, size_t) { return 0; }
int trunc(kvweld_engine*, int32_t, int32_t, char*, size_t) { return 0; }
int all(kvweld_engine*, char*, size_t) { return 0; }
[[maybe_unused]] int set_live(kvweld_engine*, const char*, const char*, char*, size_t) { return 0; }
[[maybe_unused]] int read_embeddings(const kvweld_engine*, int32_t, float*, int32_t, char*, size_t) { return 0; }
[[maybe_unused]] int set_sampler(kvweld_engine*, int32_t, const kvweld_sampler*, int32_t, char*, size_t) { return 0; }
[[maybe_unused]] int set_abort(kvweld_engine*, int32_t, char*, size_t) { return 0; }
[[maybe_unused]] int rule_create(const kvweld_engine_options*, kvweld_rule**, char*, size_t) { return 0; }
[[maybe_unused]] const char* live_settings_of(const kvweld_engine*) { return "n_threads:1|2|8"; }

[[maybe_unused]] const kvweld_setting kBoth[] = {{KVWELD_SETTING_PARAM, "x", nullptr, nullptr}};
[[maybe_unused]] const kvweld_setting kNoValues[] = {{KVWELD_SETTING_LIVE, "n_threads", nullptr, nullptr}};

constexpr kvweld_engine_api kApi = {
#if BROKEN_KIND == 1
    1,
#elif BROKEN_KIND == 6
    3,
#elif BROKEN_KIND == 14
    KVWELD_ENGINE_ABI_VERSION + 1,
#else
    KVWELD_ENGINE_ABI_VERSION,
#endif
    "broken", "llama2c",
#if BROKEN_KIND == 6
    KVWELD_CAP_PLAN_SERIAL,
#elif BROKEN_KIND == 8
    KVWELD_CAP_EMBEDDINGS,
#elif BROKEN_KIND == 9
    KVWELD_CAP_SAMPLERS,
#elif BROKEN_KIND == 10
    KVWELD_CAP_ABORT,
#elif BROKEN_KIND == 13
    KVWELD_CAP_KEEP,
#elif BROKEN_KIND == 14
    0x80000000u,  // a capability of a later version
#else
    0,
#endif
#if BROKEN_KIND == 5
    "lies:stale_decode|wrong_answer",
#elif BROKEN_KIND == 16
    "lies:stale_decode",
#else
    "",
#endif
    fail_create, destroy,
#if BROKEN_KIND == 2
    nullptr,
#else
    vocab,
#endif
    seq_op, seq_op, decode, trunc, seq_op, all, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
    nullptr, nullptr, nullptr, nullptr, nullptr,
    nullptr, nullptr, nullptr,  // version 5: no adapters, every row
    nullptr, nullptr, nullptr,  // version 6: no warmup, no twin
    nullptr, nullptr, nullptr,  // version 7: no shift, no state
    nullptr,                    // version 8: no build named
#if BROKEN_KIND == 7
    "n_threads:1|2", nullptr,   // version 9: live settings listed, set_live empty
#elif BROKEN_KIND == 8 || BROKEN_KIND == 11
    "n_threads:1|2", set_live,  // version 9: no 'embeddings' listed
#else
    nullptr, nullptr,           // version 9: no live settings
#endif
#if BROKEN_KIND == 8
    read_embeddings,            // version 10: embeddings read back, never turned on
#else
    nullptr,                    // version 10: no embeddings
#endif
#if BROKEN_KIND == 9
    set_sampler, nullptr,       // version 11: samplers declared, sampled empty
#else
    nullptr, nullptr,           // version 11: no samplers
#endif
#if BROKEN_KIND == 10
    set_abort, nullptr,         // version 12: an abort callback declared, seq_length empty
#else
    nullptr, nullptr,           // version 12: no abort callback
#endif
#if BROKEN_KIND == 11
    live_settings_of,           // version 13: an engine's list beyond its plugin's
#else
    nullptr,                    // version 13: the plugin's list
#endif
#if BROKEN_KIND == 12
    4,                          // version 14: a size short of struct_size itself
#else
    sizeof(kvweld_engine_api),  // version 14: its size
#endif
    nullptr,                    // version 14: no keep_seq (kind 13 declares it)
#if BROKEN_KIND == 15
    rule_create, nullptr, nullptr, nullptr, nullptr,  // version 14: one of the rule's five functions
#else
    nullptr, nullptr, nullptr, nullptr, nullptr,  // version 14: no rule shipped
#endif
#if BROKEN_KIND == 16
    kBoth, 1,                   // version 15: settings, and the text list besides
#elif BROKEN_KIND == 17
    kNoValues, 1,               // version 15: a live setting with nothing to draw
#else
    nullptr, 0,                 // version 15: the text lists (none)
#endif
    nullptr, nullptr,           // version 16: create above (text), every live value taken
};

}  // namespace

#if BROKEN_KIND != 4
extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) { return &kApi; }
#else
extern "C" __attribute__((visibility("default"))) int not_an_engine(void) { return kApi.abi_version; }
#endif
