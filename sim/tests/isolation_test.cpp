// An engine in a process of its own (targets/isolation/): the same rows,
// counters and sampled tokens as in this process, call for call; and an
// abort, an exit, a signal or a hang in the engine is a Crashed error
// naming the call, how the process ended and what it last wrote, after
// which the engine is gone, its process reaped, and kvweld still running.
#include "engine/model.hpp"
#include "targets/isolation/remote_process.hpp"
#include "targets/isolation/wire.hpp"
#include "targets/plugin_host.hpp"
#include "util/error.hpp"
#include "util/build_paths.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <string>

namespace kvweld::targets {
namespace {

kvweld_engine_options options(const char* model, const char* params) {
    return kvweld_engine_options{model, 32, 2, 1, nullptr, params, nullptr, 0};
}

// The pid a crash message names ("its process (pid N, ...").
pid_t named_pid(const std::string& message) {
    const auto at = message.find("(pid ");
    return at == std::string::npos ? -1 : pid_t(std::atol(message.c_str() + at + 5));
}

struct Crash {
    std::string message, title;
};

Crash crash_of(const char* params, int timeout_ms = 20000) {
    PluginEngine e(PluginLibrary::open(CRASHING_PLUGIN), options("none", params), timeout_ms);
    e.apply(calls::Open{0});
    const std::vector<int> seqs{0}, tokens{1};
    Crash c;
    try {
        e.decode(seqs, tokens);
        ADD_FAILURE() << params << ": the decode returned";
    } catch (const Crashed& crashed) {
        c = {crashed.what(), crashed.title};
    }
    // The engine is gone: every later call is the same crash, never a hang.
    try {
        e.apply(calls::Open{1});
        ADD_FAILURE() << params << ": a call after the crash returned";
    } catch (const Crashed& again) {
        EXPECT_EQ(again.title, c.title);
    }
    // Reaped: no process of that pid is left.
    const pid_t pid = named_pid(c.message);
    EXPECT_GT(pid, 0) << c.message;
    EXPECT_NE(::kill(pid, 0), 0) << "pid " << pid << " still exists";
    return c;
}

TEST(Isolation, AnAbortIsACrashNamedByItsLastLine) {
    const Crash c = crash_of("crash=abort");
    EXPECT_EQ(c.title, "SIGABRT: crashing_plugin: abort in decode") << c.message;
    EXPECT_NE(c.message.find("killed by signal 6 (SIGABRT) during decode"), std::string::npos) << c.message;
}

TEST(Isolation, AnExitAndASignalAreCrashes) {
    EXPECT_EQ(crash_of("crash=exit").title, "exit 3: crashing_plugin: exit in decode");
    const Crash segv = crash_of("crash=segv");
    EXPECT_EQ(segv.title, "SIGSEGV") << segv.message;
    EXPECT_NE(segv.message.find("it wrote nothing"), std::string::npos) << segv.message;
}

TEST(Isolation, AHangIsKilledAtTheCallTimeout) {
    const Crash c = crash_of("crash=hang", 300);
    EXPECT_EQ(c.title, "hang in decode");
    EXPECT_NE(c.message.find("answered no decode in 300 ms and was killed"), std::string::npos) << c.message;
}

TEST(Isolation, AnEngineThatLivesIsDestroyedAndItsRowsComeBack) {
    PluginEngine e(PluginLibrary::open(CRASHING_PLUGIN), options("none", ""), 20000);
    e.apply(calls::Open{0});
    const std::vector<int> seqs{0, 0}, tokens{1, 2};
    EXPECT_EQ(e.decode(seqs, tokens), std::vector<float>(8, 0.0f));
    EXPECT_EQ(e.vocab(), 4);
}

// kvweld's own plugin, in this process and in its own, fed the same calls:
// every row, counter and plan serial the same, bit for bit.
TEST(Isolation, TheSameEngineAnswersTheSameInItsOwnProcess) {
    const Model model = Model::random(tiny_config(), 7);
    const auto library = PluginLibrary::open(KVWELD_PLUGIN_PATH);
    const ModelFile file(model, library->api().model_format);
    PluginEngine here(library, options(file.path().c_str(), ""));
    PluginEngine there(library, options(file.path().c_str(), ""), 20000);
    for (PluginEngine* e : {&here, &there}) {
        e->apply(calls::Open{0});
        e->apply(calls::Open{1});
    }
    const std::vector<std::vector<int>> batches{{0, 1}, {0}, {0, 1}, {1}};
    int token = 0;
    for (const auto& seqs : batches) {
        std::vector<int> tokens;
        for (std::size_t i = 0; i < seqs.size(); ++i) tokens.push_back(token++ % model.config().vocab);
        EXPECT_EQ(here.decode(seqs, tokens), there.decode(seqs, tokens));
        EXPECT_EQ(here.counters()->builds, there.counters()->builds);
        EXPECT_EQ(here.counters()->reused, there.counters()->reused);
        EXPECT_EQ(here.plan_serial(0) != 0, there.plan_serial(0) != 0);
        for (int layer = 0; layer < model.config().n_layers; ++layer) {
            const auto dim = static_cast<std::size_t>(model.config().n_kv_heads * model.config().head_dim);
            std::vector<float> k1(dim), v1(dim), k2(dim), v2(dim);
            here.read_kv(0, layer, 0, k1, v1);
            there.read_kv(0, layer, 0, k2, v2);
            EXPECT_EQ(k1, k2);
            EXPECT_EQ(v1, v2);
        }
    }
    here.apply(calls::Truncate{0, 1});
    there.apply(calls::Truncate{0, 1});
    EXPECT_EQ(here.state_save(0), there.state_save(0));
    // A refusal is a refusal, not a crash, and the engine goes on.
    EXPECT_THROW(there.apply(calls::Truncate{0, 99}), Error);
    EXPECT_EQ(here.decode(std::vector<int>{0}, std::vector<int>{3}), there.decode(std::vector<int>{0}, std::vector<int>{3}));
}

TEST(Isolation, ACrashTitleIsTheSameForTheSameBug) {
    using isolation::crash_title;
    EXPECT_EQ(crash_title("SIGABRT", "noise\n/src/ggml.c:3354: GGML_ASSERT(x) failed\n\n"), "SIGABRT: GGML_ASSERT(x) failed");
    EXPECT_EQ(crash_title("SIGABRT", "/other/tree/ggml.c:3360: GGML_ASSERT(x) failed"), "SIGABRT: GGML_ASSERT(x) failed");
    EXPECT_EQ(crash_title("exit 1", "==4242==ERROR: x\n==4242==ABORTING\n"), "exit 1: ABORTING");
    EXPECT_EQ(crash_title("SIGSEGV", ""), "SIGSEGV");
    EXPECT_EQ(crash_title("exit 2", "note: 3 things"), "exit 2: note: 3 things");  // no file:line prefix
}

// A message shorter than its reads is an Error naming it, never a read
// past its end.
TEST(Isolation, AShortMessageIsAnError) {
    wire::Writer w(wire::Fn::decode);
    w.put(std::int32_t(5));
    wire::Reader in(w.bytes());
    EXPECT_EQ(in.get<wire::Fn>(), wire::Fn::decode);
    EXPECT_EQ(in.get<std::int32_t>(), 5);
    EXPECT_THROW(in.get<std::int32_t>(), Error);
    wire::Reader arrays(w.bytes());
    EXPECT_THROW(arrays.get_vector<float>(0), Error);  // 4 bytes of Fn read as a count past the limit
}

}  // namespace
}  // namespace kvweld::targets
