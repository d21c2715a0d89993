// The server's known findings (sim/server/server_known.hpp): each one's
// trace, failing at its last op as the finding records, matches it, and
// steered by its steer no longer does (the steer leaves the precondition,
// both halves); a steer names settings fields and values in range; and the
// fact the walk of the slot model records for restore-over-other-scales.
#include "sim/server/server_known.hpp"
#include "sim/server/server_run.hpp"

#include "util/build_paths.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvweld::sim::server {
namespace {

const ServerKnownFindings& pinned() {
    static const ServerKnownFindings known =
        load_server_known_findings(std::string(KVWELD_SOURCE_DIR) + "/targets/llamaserver/known_findings/b11434.json");
    return known;
}

const ServerKnownFinding* finding(const std::string& id) {
    for (const ServerKnownFinding& f : pinned().findings)
        if (f.id == id) return &f;
    return nullptr;
}

// `f`'s trace (less the ops `drop` names) failing at its last op as `f`
// records: its verdict, its first oracle, and what the run shows besides
// (a drafted token's logprob of 0; the server's abort in its log).
ServerRunResult failed_as_recorded(const ServerKnownFinding& f, const std::vector<int>& drop = {}) {
    std::ifstream in(f.trace);
    std::stringstream text;
    text << in.rdbuf();
    const ServerTrace t = parse_server_trace(text.str(), f.trace);
    ServerRunResult r;
    r.config = t.config;
    for (std::size_t i = 0; i < t.ops.size(); ++i)
        if (std::find(drop.begin(), drop.end(), int(i)) == drop.end()) r.ops.push_back(t.ops[i]), r.observed.push_back(t.observed[i]);
    r.verdict = f.verdict;
    // A trace of no ops: the server failed while starting, at op 0.
    r.failure = ServerFailure{r.ops.empty() ? 0 : r.ops.size() - 1, f.oracles.front(), "generated token 1: token 39 logprob 0, reference -1.9"};
    r.log = (std::filesystem::temp_directory_path() / cat("kvweld-known-test-", f.id, ".log")).string();
    // The aborts the crash findings' preconditions read (each also needs its own settings).
    std::ofstream(r.log) << "ggml/src/ggml-cpu/ops.cpp:6485: fatal error\nggml/src/ggml-backend.cpp:345: GGML_ASSERT(buffer) failed\n";
    return r;
}

// Seed 220 (steered past speculative-logprobs-unset), shrunk: an n_cmpl 2
// request with n_predict 1 leaves its cross-stream copy queued, and the next
// request takes a prompt from the RAM cache into the copy's slot (slot 0,
// cache_n 13): the queued copy lands over the loaded state. b11434+fixes
// (state-io-applies-pending-update) answers right, and so does b11434 with
// n_predict 2 (a decode applies the copy first). It is
// state-io-under-queued-copy; with one KV stream (unified), with no RAM
// cache, or with one completion, it is not.
// Finding `id` as another trace of it shows it: sim/tests/data/<data>, failing on the logprob oracle.
ServerKnownFinding on_trace(const std::string& id, const std::string& data) {
    const ServerKnownFinding* f = finding(id);
    if (!f) throw Error(cat("no known finding ", id));
    ServerKnownFinding other = *f;
    other.trace = std::string(KVWELD_SOURCE_DIR) + "/sim/tests/data/" + data;
    other.oracles = {"logprobs"};
    return other;
}

TEST(ServerKnown, ACopyThenARamCacheLoadIsStateIoUnderAQueuedCopy) {
    const ServerKnownFinding* f = finding("state-io-under-queued-copy");
    const ServerKnownFinding shrunk = on_trace("state-io-under-queued-copy", "copy_then_ram_cache_load.jsonl");
    EXPECT_EQ(pinned().match(failed_as_recorded(shrunk)), f);
    ServerRunResult unified = failed_as_recorded(shrunk), no_cache = unified, one = unified;
    unified.config.settings.unified = true;
    no_cache.config.settings.cache_ram = 0;
    std::get<Complete>(one.ops[1].args).request.n_cmpl = 1;
    for (const ServerRunResult* r : {&unified, &no_cache, &one}) EXPECT_NE(pinned().match(*r), f);
}

// busy-slot-takes-ram-cache's precondition on its own trace (a stream of
// 118 tokens on slot 0, a completion pinned to slot 0 after its first):
// it holds as recorded, and not where what went out was pinned to a slot
// the stream did not hold, went out at the stream's end, or went out after
// a stream that ended before its moment.
TEST(ServerKnown, APinnedRequestToABusySlotIsBusySlotTakesRamCacheAndOnlyThen) {
    const ServerKnownFinding* f = finding("busy-slot-takes-ram-cache");
    ASSERT_NE(f, nullptr);
    const ServerRunResult recorded = failed_as_recorded(*f);
    EXPECT_EQ(pinned().match(recorded), f);
    ServerRunResult elsewhere = recorded, at_end = recorded, after = recorded;
    elsewhere.config.settings.slots = 2;
    std::get<Completion>(std::get<During>(elsewhere.ops[1].args).then).slot = 1;
    std::get<During>(at_end.ops[1].args).at_token = 0;
    after.observed[1]["ended"] = true;
    for (const ServerRunResult* r : {&elsewhere, &at_end, &after}) EXPECT_NE(pinned().match(*r), f);
}

// Scales a during op sets while its stream runs count from after the
// stream: seed 190 (b11434, shrunk) sets the server's scales to 0.5 and 0
// during a stream that names none, then a request naming none reuses the
// stream's slot (cache_n 19): lora-default-keeps-cache. Where the during
// op sends a completion instead, the scales never changed, and it is not.
TEST(ServerKnown, ScalesSetDuringAStreamAreTheServersFromThen) {
    const ServerKnownFinding* f = finding("lora-default-keeps-cache");
    const ServerKnownFinding during = on_trace("lora-default-keeps-cache", "during_lora_then_server_scales.jsonl");
    const ServerRunResult recorded = failed_as_recorded(during);
    EXPECT_EQ(pinned().match(recorded), f);
    ServerRunResult unchanged = recorded;
    During& d = std::get<During>(unchanged.ops[0].args);
    Completion other = d.stream;
    other.stream = false, other.n_cmpl = 1, other.slot = 1;
    d.then = other;
    unchanged.observed[0]["then"] = nlohmann::json::array({{{"slot", 1}, {"cache_n", 0}, {"tokens", {1}}}});
    EXPECT_NE(pinned().match(unchanged), f);
}

TEST(ServerKnown, EachFindingsTraceMatchesItAndItsSteerLeavesThePrecondition) {
    ASSERT_GE(pinned().findings.size(), 9u);
    for (const ServerKnownFinding& f : pinned().findings) {
        ServerRunResult r = failed_as_recorded(f);
        const ServerKnownFinding* as_recorded = pinned().match(r);
        EXPECT_EQ(as_recorded, &f) << f.id << " matched " << (as_recorded ? as_recorded->id : "nothing");
        ASSERT_TRUE(f.steerable()) << f.id;
        r.config.settings = steered(r.config.settings, f);
        const ServerKnownFinding* after = pinned().match(r);
        EXPECT_NE(after, &f) << f.id << ": its steer " << f.steer.dump() << " leaves its precondition holding";
        std::filesystem::remove(r.log);
    }
}

TEST(ServerKnown, ASteerSetsItsFieldsOverTheDrawnOnesAndNamesAWrongOne) {
    const ServerKnownFinding& f = *finding("pinned-empty-slot-skips-cache");
    for (std::uint64_t seed = 0; seed < 200; ++seed) {
        const ServerSettings drawn = ServerSettings::draw(seed, "llama"), s = steered(drawn, f);
        EXPECT_EQ(s.cache_ram, 0);
        EXPECT_FALSE(s.idle_slots);
        EXPECT_EQ(s.slots, drawn.slots);  // the rest as drawn
        EXPECT_EQ(s.kv_type, drawn.kv_type);
    }
    ServerKnownFinding g = f;
    g.steer = {{"cache_rams", 0}};
    EXPECT_THROW(
        try { steered(ServerSettings::draw(1, "llama"), g); } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("'cache_rams' is not a settings field"), std::string::npos) << e.what();
            throw;
        },
        Error);
    g.steer = {{"slots", 17}};  // the table allows 1 to 16
    EXPECT_THROW(steered(ServerSettings::draw(1, "llama"), g), Error);
}

TEST(ServerKnown, AFileWithABadSteerIsRefusedNamingTheFinding) {
    std::ifstream in(std::string(KVWELD_SOURCE_DIR) + "/targets/llamaserver/known_findings/b11434.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["findings"][0]["steer"] = {{"draft", 7}};
    const auto dir = std::filesystem::temp_directory_path() / "kvweld-known-steer-test";
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "b.json") << j.dump();
    try {
        load_server_known_findings((dir / "b.json").string());
        ADD_FAILURE() << "a steer of draft 7 was taken";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("finding state-io-under-queued-copy: steer: field 'draft'"), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(dir);
}

// restore-over-other-scales, judged on its finding's trace: slot 0 saved
// with the server's scales, the server's scales changed and a request run,
// the file restored, then a request with the file's scales fails.
ServerRunResult failing_at_last(const std::vector<int>& drop) {
    return failed_as_recorded(*finding("slot-restore-ignores-lora"), drop);
}

TEST(ServerKnown, ARestoreOverOtherAdaptersIsMarkedAndOnlyThen) {
    const ServerKnownFindings& known = pinned();
    const ServerKnownFinding* f = known.match(failing_at_last({}));
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->id, "slot-restore-ignores-lora");
    // Without the adapter change (op 2) the file's KV has the slot's adapters: nothing stale to restore.
    const ServerKnownFinding* g = known.match(failing_at_last({2}));
    EXPECT_TRUE(g == nullptr || g->id != "slot-restore-ignores-lora") << g->id;
    // A request on the restored slot before the failing one computes over it: the mark is gone.
    ServerRunResult r = failing_at_last({});
    r.ops.insert(r.ops.end() - 1, r.ops[3]), r.observed.insert(r.observed.end() - 1, r.observed[3]);
    r.failure->op = r.ops.size() - 1;
    const ServerKnownFinding* h = known.match(r);
    EXPECT_TRUE(h == nullptr || h->id != "slot-restore-ignores-lora") << h->id;
}

}  // namespace
}  // namespace kvweld::sim::server
