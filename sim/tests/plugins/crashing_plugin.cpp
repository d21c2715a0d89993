// A plugin whose decode dies the way an engine's process can, for the
// isolation tests (targets/isolation/): params "crash=abort" (a line to
// stderr, then abort()), "crash=exit" (exit status 3), "crash=segv" (a
// null write), "crash=hang" (never answers), or none (zeros). Every other
// call succeeds; its vocab is the model file's (4 without one).
#include "kvweld/engine_abi.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct kvweld_engine {
    char crash[16];
    int32_t vocab;
};

namespace {

int create(const kvweld_engine_options* o, kvweld_engine** out, char*, size_t) {
    auto* e = new kvweld_engine{};
    const char* p = o->params ? std::strstr(o->params, "crash=") : nullptr;
    if (p) std::snprintf(e->crash, sizeof e->crash, "%s", p + 6);
    // The vocab of the model file (the llama2.c header's sixth int), so
    // that kvweld's runs take it; 4 when there is none.
    e->vocab = 4;
    if (FILE* f = std::fopen(o->model_path, "rb")) {
        int32_t header[7];
        if (std::fread(header, sizeof header, 1, f) == 1 && header[5] != 0) e->vocab = header[5] < 0 ? -header[5] : header[5];
        std::fclose(f);
    }
    *out = e;
    return 0;
}
void destroy(kvweld_engine* e) { delete e; }
int32_t vocab(const kvweld_engine* e) { return e->vocab; }
int seq_op(kvweld_engine*, int32_t, char*, size_t) { return 0; }
int trunc(kvweld_engine*, int32_t, int32_t, char*, size_t) { return 0; }
int all(kvweld_engine*, char*, size_t) { return 0; }

int decode(kvweld_engine* e, const int32_t*, const int32_t*, int32_t n, float* logits, char*, size_t) {
    if (!std::strcmp(e->crash, "abort")) {
        std::fprintf(stderr, "crashing_plugin.cpp:41: crashing_plugin: abort in decode\n");
        std::abort();
    }
    if (!std::strcmp(e->crash, "exit")) {
        std::fprintf(stderr, "crashing_plugin: exit in decode\n");
        std::fflush(stderr);
        _exit(3);
    }
    if (!std::strcmp(e->crash, "segv")) std::raise(SIGSEGV);
    if (!std::strcmp(e->crash, "hang"))
        for (;;) pause();
    std::memset(logits, 0, sizeof(float) * size_t(n) * size_t(e->vocab));
    return 0;
}

// Only what it has; every other field NULL.
kvweld_engine_api table() {
    kvweld_engine_api t{};
    t.abi_version = KVWELD_ENGINE_ABI_VERSION;
    t.name = "crashing";
    t.model_format = "llama2c";
    t.fault_names = "";
    t.create = create;
    t.destroy = destroy;
    t.vocab = vocab;
    t.open_seq = seq_op;
    t.close_seq = seq_op;
    t.decode = decode;
    t.truncate = trunc;
    t.clear_seq = seq_op;
    t.clear_all = all;
    t.struct_size = sizeof(kvweld_engine_api);
    return t;
}

const kvweld_engine_api kApi = table();

}  // namespace

extern "C" __attribute__((visibility("default"))) const kvweld_engine_api* kvweld_engine_entry(void) { return &kApi; }
