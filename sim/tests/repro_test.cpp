// kvweld repro's parts that need no compiler: the ground truth's text, the
// finding a trace belongs to, and the program a llama.cpp trace becomes.
#include "sim/repro.hpp"
#include "targets/repro.hpp"
#include "util/error.hpp"
#include "util/build_paths.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

namespace kvweld::sim {
namespace {

const std::string kFindings = std::string(KVWELD_SOURCE_DIR) + "/targets/llamacpp/";

TEST(ReproTruth, ParsesSettingsSkipsAndCounting) {
    const targets::ReproTruth t = targets::parse_repro_truth("kv_unified=0,skip=7+8,count-reuse");
    EXPECT_EQ(t.params, "kv_unified=0");
    EXPECT_EQ(t.skip, (std::vector<int>{7, 8}));
    EXPECT_TRUE(t.count_reuse);
    const targets::ReproTruth plain = targets::parse_repro_truth("graph_reuse=0");
    EXPECT_TRUE(plain.skip.empty());
    EXPECT_FALSE(plain.count_reuse);
}

TEST(ReproTruth, NamesWhatItCannotRead) {
    for (const char* bad : {"skip=1", "skip=x", "skip=3+", "nonsense", "=1"}) {
        try {
            targets::parse_repro_truth(bad);
            ADD_FAILURE() << bad << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
        }
    }
}

TEST(ReproFinding, EachTraceHasItsFindingsEntryWithAGroundTruth) {
    const auto warmup = finding_of_trace(kFindings + "known_findings/warmup_switch_keeps_graph.jsonl", "llamacpp");
    ASSERT_TRUE(warmup);
    EXPECT_EQ(warmup->id, "warmup-switch-keeps-graph");
    EXPECT_EQ(warmup->repro_truth, "graph_reuse=0");
    const auto lora = finding_of_trace(kFindings + "findings/0.3.16/lora_change_keeps_graph.jsonl", "llamacpp@0.3.16");
    ASSERT_TRUE(lora);
    EXPECT_EQ(lora->id, "lora-change-keeps-graph");
    // A trace no findings file beside it names (a copy in a folder of its own).
    const auto folder = std::filesystem::temp_directory_path() / "kvweld-repro-test";
    std::filesystem::create_directories(folder / "sub");
    std::filesystem::copy_file(std::string(KVWELD_SOURCE_DIR) + "/sim/tests/data/cvec_set_once.jsonl",
                               folder / "sub" / "t.jsonl", std::filesystem::copy_options::overwrite_existing);
    EXPECT_FALSE(finding_of_trace((folder / "sub" / "t.jsonl").string(), "llamacpp"));
    std::filesystem::remove_all(folder);
}

#ifdef LLAMACPP_PLUGIN_PATH
// The ops the ground truth skips run on the engine alone; every other on both.
TEST(ReproWriter, SkippedOpsRunOnTheEngineAlone) {
    const Repro r = write_repro(kFindings + "known_findings/state_saved_before_k_shift.jsonl", "", "test");
    EXPECT_EQ(r.truth, "skip=6+7");
    EXPECT_NE(r.source.find("live(engine_only, 6)) save(*s, 0, 1);"), std::string::npos);
    EXPECT_NE(r.source.find("live(engine_only, 7)) load(*s, 0, 1, 1);"), std::string::npos);
    EXPECT_NE(r.source.find("live(both, 5)) expect(*s, llama_memory_seq_rm(s->mem(), 0, 0, 1), \"llama_memory_seq_rm\");"),
              std::string::npos);
    EXPECT_NE(r.source.find("live(both, 5)) llama_memory_seq_add(s->mem(), 0, 1, -1, -1);"), std::string::npos);
    // Each program stays short enough to read whole (issue 45: at most 200 lines).
    EXPECT_LE(std::count(r.source.begin(), r.source.end(), '\n'), 200);
    EXPECT_EQ(r.replay.verdict, Verdict::stale_decode);
    EXPECT_LE(r.call_lines, 60);
}
#endif

}  // namespace
}  // namespace kvweld::sim
