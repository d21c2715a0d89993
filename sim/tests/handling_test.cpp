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
// listed below with why.
#include "engine/faults.hpp"
#include "sim/observers.hpp"
#include "sim/run.hpp"
#include "sim/simulator.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

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
        // Checks no fault switch needs yet: each fault they would catch, the
        // accounting oracle catches first at the same op (shift_remints_id),
        // or the data oracle reads the freed rows' old content as wrong anyway.
        {{"StorageLedger", int(MemoryCall(targets::calls::Shift{}).index())},
         "its poison of the freed tail and its storage check: every built-in fault is caught first elsewhere"},
        {{"StorageLedger", int(MemoryCall(targets::calls::Load{}).index())},
         "its poison past the loaded length and its storage check: every built-in fault is caught first elsewhere"},
    };
    return m;
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
const std::vector<Kill>& kills_of(const std::string& engine, const std::string& fault) {
    static std::map<std::pair<std::string, std::string>, std::vector<Kill>> cache;
    if (const auto it = cache.find({engine, fault}); it != cache.end()) return it->second;
    std::vector<Kill>& kills = cache[{engine, fault}];
    const EngineChoice choice{engine, "", fault};
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
    const EngineChoice choice{engine, "", ""};
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
        for (const abi::ListedFault& f : abi::split_fault_list(targets::engine_fault_list(engine).c_str()))
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

template <class O>
void every_handled_call_is_needed(const std::string& name, const std::vector<std::string>& engines) {
    const std::vector<int> calls = handled_calls<O>();
    ASSERT_FALSE(calls.empty()) << name;
    for (int call : calls) {
        if (unreachable().count({name, call})) continue;
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

}  // namespace
}  // namespace kvweld::sim
