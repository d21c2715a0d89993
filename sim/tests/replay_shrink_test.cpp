// Replay reproduces a run's report byte for byte; shrink minimizes a failing
// trace and keeps its failure class. The failing traces come from the
// engine's fault switches (test builds only).
#include "engine/error.hpp"
#include "engine/faults.hpp"
#include "sim/report.hpp"
#include "sim/shrink.hpp"
#include "sim/trace.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvweld::sim {
namespace {

RunResult replay(const RunResult& original) {
    const Trace t = parse_trace(trace_text(original.config, original.steps, original.ops));
    return run_ops(t.config, t.ops, t.steps);
}

TEST(Replay, ReproducesAPassingReportByteForByte) {
    const RunResult original = run_generated(draw_config(31), 250);
    ASSERT_EQ(original.verdict, Verdict::pass);
    const RunResult again = replay(original);
    EXPECT_EQ(text_report(again), text_report(original));
    EXPECT_EQ(json_report(again).dump(), json_report(original).dump());
}

SimConfig with_fault(std::uint64_t seed, Fault f) {
    DrawOptions o;
    o.faults.add(f);
    return draw_config(seed, o);
}

// First seed in [0, 200) whose run fails under the fault.
RunResult first_failure(Fault f, int steps) {
    for (std::uint64_t seed = 0; seed < 200; ++seed) {
        RunResult r = run_generated(with_fault(seed, f), steps);
        if (r.verdict != Verdict::pass) return r;
    }
    ADD_FAILURE() << "no seed fails under " << to_string(f);
    return {};
}

TEST(Replay, ReproducesAFailingReportByteForByte) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const RunResult original = first_failure(Fault::spec_reject_off_by_one, 300);
    ASSERT_EQ(original.verdict, Verdict::stale_decode);
    EXPECT_EQ(text_report(replay(original)), text_report(original));
}

TEST(Shrink, YieldsAShorterTraceThatFailsTheSameWay) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    for (Fault f : {Fault::no_remint_on_clear, Fault::spec_reject_off_by_one, Fault::model_id_not_in_key}) {
        const RunResult original = first_failure(f, 300);
        ASSERT_NE(original.verdict, Verdict::pass);
        const ShrinkResult s = shrink(original.config, original.ops, original.steps, original.verdict);
        EXPECT_LT(s.ops.size(), original.ops.size()) << to_string(f);
        EXPECT_LE(s.ops.size(), 6u) << to_string(f);  // these faults need only a handful of ops
        EXPECT_EQ(s.result.verdict, original.verdict) << to_string(f);
        // and the written trace replays to the same failure
        EXPECT_EQ(replay(s.result).verdict, original.verdict) << to_string(f);
        std::printf("%s: %zu ops -> %zu ops (%d runs)\n", std::string(to_string(f)).c_str(),
                    original.ops.size(), s.ops.size(), s.runs);
    }
}

TEST(Shrink, RefusesAPassingTrace) {
    const RunResult ok = run_generated(draw_config(3), 50);
    EXPECT_THROW(shrink(ok.config, ok.ops, ok.steps, Verdict::stale_decode), Error);
}

}  // namespace
}  // namespace kvweld::sim
