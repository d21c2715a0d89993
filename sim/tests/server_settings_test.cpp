// A server run's settings: every drawn one survives JSON, a trace written
// before a field reads the value its servers ran with, the shrinker's
// simpler settings cover every field that has a simpler value, and the
// script a finding's trace becomes judges within the trace's KV type.
#include "sim/server/server_run.hpp"
#include "sim/server/server_settings.hpp"

#include "util/build_paths.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>

namespace kvweld::sim::server {
namespace {

TEST(ServerSettings, EveryDrawnSettingRoundTripsThroughJson) {
    for (const std::string arch : {"llama", "granite_swa", "mamba", "lfm2", "lfm2_swa"}) {
        std::map<std::string, std::set<std::string>> seen;  // each field's values over the seeds
        for (std::uint64_t seed = 0; seed < 1000; ++seed) {
            const ServerSettings s = ServerSettings::draw(seed, arch);
            const nlohmann::json j = s.to_json();
            EXPECT_EQ(ServerSettings::from_json(j), s) << "seed " << seed << ": " << j.dump();
            for (const auto& [name, value] : j.items()) seen[name].insert(value.dump());
        }
        // Not vacuous: every field is written, and the draw varies each it draws for the arch, and no other.
        EXPECT_EQ(seen.size(), 17u);
        for (const auto& [name, values] : seen) EXPECT_EQ(values.size() >= 2, is_drawn(name, arch)) << arch << " " << name;
    }
}

// A llama seed draws what it drew before the other archs (its server's
// command line too: no checkpoint flags), and the other archs' seeds run
// without what the server turns off for them or kvweld has no model of.
TEST(ServerSettings, TheOtherArchsDrawOnTheirOwnStream) {
    for (std::uint64_t seed = 0; seed < 300; ++seed) {
        const ServerSettings llama = ServerSettings::draw(seed, "llama");
        for (const std::string& f : llama.flags()) EXPECT_EQ(f.find("checkpoint"), std::string::npos) << f;
        const ServerSettings swa = ServerSettings::draw(seed, "granite_swa");
        EXPECT_EQ(swa.slots, llama.slots);
        EXPECT_EQ(swa.cache_reuse, llama.cache_reuse) << seed;  // drawn as llama's: the server shifts a window this small
        EXPECT_TRUE(!swa.embeddings() && swa.draft == 0 && swa.loras == 0) << seed;
        const std::vector<std::string> flags = swa.flags();
        EXPECT_NE(std::find(flags.begin(), flags.end(), "--ctx-checkpoints"), flags.end());
    }
    nlohmann::json bad = ServerSettings::draw(1, "mamba").to_json();
    bad["arch"] = "gpt2";
    try {
        ServerSettings::from_json(bad);
        ADD_FAILURE() << "arch gpt2 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("llama, granite_swa, mamba, lfm2, lfm2_swa"), std::string::npos) << e.what();
    }
    bad = ServerSettings::draw(1, "mamba").to_json();
    bad["swa_full"] = true;
    EXPECT_THROW(ServerSettings::from_json(bad), Error);
}

TEST(ServerSettings, ATraceWrittenBeforeAFieldReadsTheValueItsServersRanWith) {
    nlohmann::json j = ServerSettings::draw(7, "llama").to_json();
    j.erase("kv_type"), j.erase("loras"), j.erase("cache_ram"), j.erase("context_shift");
    for (const char* f : {"arch", "window", "swa_full", "ctx_checkpoints", "checkpoint_min_step", "ngram"}) j.erase(f);
    const ServerSettings s = ServerSettings::from_json(j);
    EXPECT_EQ(s.arch, "llama");
    EXPECT_EQ(s.ctx_checkpoints, 32);  // the server's defaults
    EXPECT_EQ(s.checkpoint_min_step, 8192);
    EXPECT_EQ(s.kv_type, KvType::f32);
    EXPECT_EQ(s.loras, 0);
    EXPECT_EQ(s.cache_ram, 0);
    EXPECT_FALSE(s.context_shift);
    // A field every trace has may not be missing; a value out of range names the field and its range.
    nlohmann::json no_slots = j;
    no_slots.erase("slots");
    EXPECT_THROW(ServerSettings::from_json(no_slots), Error);
    nlohmann::json bad = ServerSettings::draw(7, "llama").to_json();
    bad["kv_type"] = "q4_0";
    try {
        ServerSettings::from_json(bad);
        ADD_FAILURE() << "kv_type q4_0 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("q4_0"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("f32, f16 or bf16"), std::string::npos) << e.what();
    }
    bad = ServerSettings::draw(7, "llama").to_json();
    bad["slots"] = 2, bad["ctx_extra"] = 2;
    EXPECT_THROW(ServerSettings::from_json(bad), Error);
}

TEST(ServerSettings, SimplerSettingsCoverEveryFieldWithASimplerValue) {
    const ServerSettings busy{.slots = 3, .unified = true, .cache_reuse = 4, .pooling = "", .ctx_extra = 2, .loras = 2,
                              .cache_ram = 8192, .idle_slots = true, .draft = 2, .context_shift = true, .kv_type = KvType::bf16,
                              .arch = "llama", .window = 8, .swa_full = false, .ctx_checkpoints = 32, .checkpoint_min_step = 8192, .ngram = false};
    const nlohmann::json before = busy.to_json();
    std::set<std::string> changed;
    for (const ServerSettings& c : busy.simpler()) {
        const nlohmann::json after = c.to_json();
        std::vector<std::string> fields;
        for (const auto& [name, value] : after.items())
            if (value != before.at(name)) fields.push_back(name);
        ASSERT_EQ(fields.size(), 1u) << after.dump();  // one field at a time
        changed.insert(fields[0]);
    }
    // The slots, the adapters and the pooling have none (the ops name
    // them), nor the arch and its window (the model's); a llama server runs
    // without the checkpoints, which its shrink leaves alone.
    EXPECT_EQ(changed, (std::set<std::string>{"unified", "cache_reuse", "ctx_extra", "cache_ram", "idle_slots", "draft",
                                              "context_shift", "kv_type"}));
    EXPECT_TRUE(ServerSettings::draw(0, "llama").simpler().size() <= 8u);
    ServerSettings swa = busy;
    swa.arch = "granite_swa", swa.swa_full = true, swa.loras = 0, swa.draft = 0, swa.ctx_checkpoints = 3, swa.checkpoint_min_step = 4, swa.ngram = true;
    changed.clear();
    const nlohmann::json swa_json = swa.to_json();
    for (const ServerSettings& c : swa.simpler()) {
        const nlohmann::json after = c.to_json();
        for (const auto& [name, value] : after.items())
            if (value != swa_json.at(name)) changed.insert(name);
    }
    EXPECT_EQ(changed, (std::set<std::string>{"unified", "cache_reuse", "ctx_extra", "cache_ram", "idle_slots", "context_shift",
                                              "kv_type", "swa_full", "ctx_checkpoints", "checkpoint_min_step", "ngram"}));
}

// The script of a trace run with f16 rows holds f16's tolerance: a correct
// server's 16-bit rows round further from the reference than F32's 1e-4.
TEST(ServerScript, JudgesWithinTheTracesKvTolerance) {
    const std::string path = std::string(KVWELD_SOURCE_DIR) + "/targets/llamaserver/known_findings/lora_default_keeps_cache.jsonl";
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const ServerTrace t = parse_server_trace(text, path);
    for (const KvType type : {KvType::f32, KvType::f16, KvType::bf16}) {
        ServerRunResult r;
        r.config = t.config, r.ops = t.ops, r.observed = t.observed;
        r.config.settings.kv_type = type;
        r.verdict = ServerVerdict::fail;
        r.failure = ServerFailure{t.ops.size() - 1, "logprobs", "planted"};
        const std::string script = server_script(r, "test");
        const std::string line = cat("tol = ", kv_tolerance(type), "  # with ", kv_type_name(type), " KV rows");
        EXPECT_NE(script.find(line), std::string::npos) << line;
        EXPECT_NE(script.find("shown |= d > tol"), std::string::npos);
    }
}

}  // namespace
}  // namespace kvweld::sim::server
