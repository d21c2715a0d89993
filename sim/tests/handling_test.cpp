// The harness checks itself where it can go blind: for every call kind an
// observer handles (every MemoryCall alternative not in its IgnoredCalls,
// sim/observers.hpp), the observer is made deaf to that kind alone
// (Simulator::drop_handling) and runs again with the same ops: a seed that
// passed must fail (state the observer tracks went wrong: a false alarm), or
// a fault switch's first kill must change (the check it makes went blind).
// A handler whose removal shows neither is dead code or an oracle gone
// blind. The pairs read off the types, so a call
// kind added later, or one taken out of an IgnoredCalls list, is checked
// the moment it exists; where no built-in engine makes a call, the pair is
// listed below with why, and where a swarm's seeds do not show the need, a
// trace made for the pair shows it (Directed, below).
#include "engine/faults.hpp"
#include "sim/tests/llama_required.hpp"
#include "sim/observers.hpp"
#include "sim/run.hpp"
#include "sim/simulator.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"
#include "util/build_paths.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#ifndef LLAMACPP_PLUGIN_PATH
#define LLAMACPP_PLUGIN_PATH ""
#endif

namespace kvweld::sim {
namespace {

using targets::MemoryCall;

constexpr int kSeeds = 12;  // per engine; each seed stops at its first failure
constexpr int kSteps = 300;

template <class O, std::size_t I>
constexpr bool handles() {
    return !std::is_base_of_v<IgnoredOne<std::variant_alternative_t<I, MemoryCall>>, typename O::IgnoredCalls>;
}

template <class O, std::size_t... I>
std::vector<int> handled_calls(std::index_sequence<I...>) {
    std::vector<int> out;
    ((handles<O, I>() ? out.push_back(int(I)) : void()), ...);
    return out;
}
template <class O>
std::vector<int> handled_calls() {
    return handled_calls<O>(std::make_index_sequence<std::variant_size_v<MemoryCall>>{});
}

// Pairs no built-in engine and fault shows the need of, each with why
// (observer, call index): not run.
const std::map<std::pair<std::string, int>, std::string>& unreachable() {
    static const std::map<std::pair<std::string, int>, std::string> m = {
        {{"StorageLedger", int(MemoryCall(targets::calls::PoolOp{}).index())},
         "a pool reset with storage reports: kvweld-paged reports no per-sequence storage"},
        {{"BlockLedger", int(MemoryCall(targets::calls::Keep{}).index())},
         "a keep on a paged engine: kvweld-paged has no keep_seq"},
        // The fresh prefill runs on llama.cpp's other memories only.
        {{"FreshPrefill", int(MemoryCall(targets::calls::OpenSized{}).index())},
         "a sized open: white box, kvweld in process (the fresh prefill runs on llama.cpp's other memories)"},
        {{"FreshPrefill", int(MemoryCall(targets::calls::Migrate{}).index())},
         "a migrate: white box, kvweld in process"},
        {{"FreshPrefill", int(MemoryCall(targets::calls::SetLoras{}).index())},
         "LoRA adapters: withheld on another memory (kvweld's adapters are llama's)"},
        {{"FreshPrefill", int(MemoryCall(targets::calls::SetWarmup{}).index())},
         "warmup on an MoE model: the other memories' models are dense, where warmup changes nothing"},
    };
    return m;
}

// Pairs a swarm of kSeeds does not show the need of, each shown by a trace
// made for it (sim/tests/data): with the handling, the trace fails as the
// file's name says; deaf to it, the same ops pass. A dead row's poison
// matters only where the bytes a dead row kept are the ones a correct write
// would put there (the same token at the same position in the same
// context), which a swarm's first failure rarely waits for.
struct Directed {
    const char* observer;
    int call;
    const char* trace;  // under sim/tests/data
};
const std::vector<Directed>& directed() {
    static const std::vector<Directed> v = {
        // refeed_write_skipped after a load onto the sequence the state was
        // saved from: row 4 keeps what the same token wrote before the load.
        {"StorageLedger", int(MemoryCall(targets::calls::Load{}).index()), "poison_after_load.jsonl"},
        // The same after a shift, on a one-layer model (a deeper layer's row
        // depends on the context the shift changed): the freed tail's row 4
        // held the token the next decode writes there.
        {"StorageLedger", int(MemoryCall(targets::calls::Shift{}).index()), "poison_after_shift.jsonl"},
    };
    return v;
}
const Directed* directed_case(const std::string& observer, int call) {
    for (const Directed& d : directed())
        if (d.observer == observer && d.call == call) return &d;
    return nullptr;
}

// A run of `ops` with the observer deaf to `call` (nullopt: the observer
// does not run here). An exception out of a deaf observer counts as a
// failure: the harness noticed, loudly.
template <class O>
std::optional<RunResult> deaf_run(const SimConfig& config, const std::vector<Op>& ops, int call) {
    bool running = false;
    try {
        RunResult r = run_ops(config, ops, kSteps, [&](Simulator& s) { running = s.drop_handling<O>(call); });
        if (!running) return std::nullopt;
        return r;
    } catch (const std::exception& e) {
        RunResult r;
        r.verdict = Verdict::engine_error;
        r.failure.emplace();
        r.failure->detail = e.what();
        return r;
    }
}

// A fault switch's failing seeds (of kSeeds) on an engine: each one's
// config, its ops up to the failure, and how it failed.
struct Kill {
    SimConfig config;
    std::vector<Op> ops;
    Failure failure;
};
// An engine as these tests name it: a built-in name, then its settings
// after a space ("llamacpp arch=lfm2").
EngineChoice choice_of(const std::string& engine, const std::string& fault) {
    const std::size_t space = engine.find(' ');
    return {engine.substr(0, space), space == std::string::npos ? "" : engine.substr(space + 1), fault};
}

const std::vector<Kill>& kills_of(const std::string& engine, const std::string& fault) {
    static std::map<std::pair<std::string, std::string>, std::vector<Kill>> cache;
    if (const auto it = cache.find({engine, fault}); it != cache.end()) return it->second;
    std::vector<Kill>& kills = cache[{engine, fault}];
    const EngineChoice choice = choice_of(engine, fault);
    for (int seed = 0; seed < kSeeds; ++seed) {
        const SimConfig config = draw_config(std::uint64_t(seed), choice, "", choice_capabilities(choice));
        RunResult r = run_generated(config, kSteps);
        if (r.verdict != Verdict::pass) kills.push_back({config, std::move(r.ops), *r.failure});
    }
    return kills;
}

// The passing seeds (of kSeeds) of the engine with no fault: each one's
// config and ops.
struct Clean {
    SimConfig config;
    std::vector<Op> ops;
};
const std::vector<Clean>& clean_runs(const std::string& engine) {
    static std::map<std::string, std::vector<Clean>> cache;
    if (const auto it = cache.find(engine); it != cache.end()) return it->second;
    std::vector<Clean>& runs = cache[engine];
    const EngineChoice choice = choice_of(engine, "");
    for (int seed = 0; seed < kSeeds; ++seed) {
        const SimConfig config = draw_config(std::uint64_t(seed), choice, "", choice_capabilities(choice));
        RunResult r = run_generated(config, kSteps);
        if (r.verdict == Verdict::pass) runs.push_back({config, std::move(r.ops)});
    }
    return runs;
}

// How the handling's removal shows, on the first engine where it does: a
// false alarm on a correct engine (a seed that passes fails deaf), or a
// fault switch's failing seed caught otherwise (later, by another oracle,
// or not at all).
// "" where nothing shows.
template <class O>
std::string caught_by(int call, const std::vector<std::string>& engines) {
    for (const std::string& engine : engines) {
        for (const Clean& clean : clean_runs(engine)) {
            const std::optional<RunResult> deaf = deaf_run<O>(clean.config, clean.ops, call);
            if (!deaf) break;  // this engine does not run the observer
            if (deaf->verdict != Verdict::pass) return cat(engine, " seed ", clean.config.seed, ": a false alarm");
        }
        const std::string name = choice_of(engine, "").engine;
        for (const abi::ListedFault& f : abi::split_fault_list(targets::engine_fault_list(name).c_str()))
            for (const Kill& kill : kills_of(engine, f.name)) {
                const std::optional<RunResult> deaf = deaf_run<O>(kill.config, kill.ops, call);
                if (!deaf) return "";  // this engine does not run the observer
                const bool same = deaf->failure && deaf->failure->op_index == kill.failure.op_index &&
                                  deaf->failure->oracle == kill.failure.oracle;
                if (!same) return cat(engine, " fault ", f.name, " seed ", kill.config.seed, ": no longer caught as it was");
            }
    }
    return "";
}

// A directed case: its trace fails at a decode with the handling, and
// passes deaf to it.
template <class O>
void expect_directed_needs(const Directed& d) {
    std::ifstream in(std::string(KVWELD_SOURCE_DIR) + "/sim/tests/data/" + d.trace);
    ASSERT_TRUE(in) << d.trace;
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const Trace t = parse_trace(text, d.trace);
    if (!kFaultsCompiled) {  // the asan preset: the trace's fault switch is not built
        std::printf("%s call %d: not checked in a build without fault switches\n", d.observer, d.call);
        return;
    }
    const RunResult heard = run_ops(t.config, t.ops, t.steps);
    ASSERT_NE(heard.verdict, Verdict::pass) << d.trace << ": passes with the handling";
    const std::optional<RunResult> deaf = deaf_run<O>(t.config, t.ops, d.call);
    ASSERT_TRUE(deaf) << d.trace << ": the engine does not run " << d.observer;
    EXPECT_EQ(deaf->verdict, Verdict::pass) << d.trace << ": deaf to call " << d.call << ", " << d.observer
                                            << " still fails it: " << (deaf->failure ? deaf->failure->detail : "");
}

template <class O>
void every_handled_call_is_needed(const std::string& name, const std::vector<std::string>& engines) {
    const std::vector<int> calls = handled_calls<O>();
    ASSERT_FALSE(calls.empty()) << name;
    for (int call : calls) {
        if (unreachable().count({name, call})) continue;
        if (const Directed* d = directed_case(name, call)) {
            expect_directed_needs<O>(*d);
            continue;
        }
        const std::string by = caught_by<O>(call, engines);
        if (by.empty() && !kFaultsCompiled) {  // the asan preset: no fault switch to show it with
            std::printf("%s call %d: not checked in a build without fault switches\n", name.c_str(), call);
            continue;
        }
        EXPECT_NE(by, "") << name << " handles MemoryCall alternative " << call
                          << ", yet with that handling removed " << kSeeds << " seeds of each engine pass";
    }
}

TEST(HandlingIsNeeded, DataShadow) { every_handled_call_is_needed<DataShadow>("DataShadow", {"inproc", "kvweld"}); }
TEST(HandlingIsNeeded, StorageLedger) { every_handled_call_is_needed<StorageLedger>("StorageLedger", {"inproc"}); }
TEST(HandlingIsNeeded, BlockLedger) { every_handled_call_is_needed<BlockLedger>("BlockLedger", {"kvweld-paged"}); }
TEST(HandlingIsNeeded, FreshPrefill) {
    if (!*LLAMACPP_PLUGIN_PATH) KVWELD_WITHOUT_LLAMA("llama.cpp plugin not built (llama.cpp not found: scripts/setup)");
    every_handled_call_is_needed<FreshPrefill>("FreshPrefill", {"llamacpp arch=mamba"});
}

}  // namespace
}  // namespace kvweld::sim
