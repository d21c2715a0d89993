// The plugin ABI, driven through the loader: kvweld's own engine and
// llama.cpp as plugins agree with the reference on interleaved sequences,
// truncate, clear and copy; every broken plugin is a clear Error, never a
// crash.
#include "targets/abi_lists.hpp"
#include "util/cat.hpp"
#include "engine/checkpoint.hpp"
#include "engine/gguf.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "engine/reference.hpp"
#include "util/rng.hpp"
#include "targets/given_settings.hpp"
#include "targets/plugin_host.hpp"
#include "sim/tests/llama_required.hpp"
#include "util/build_paths.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <map>
#include <iostream>
#include <optional>

namespace kvweld::targets {
namespace {


std::string temp_path(const char* name) {
    return (std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + "-" + name)).string();
}

void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> fragments) {
    try {
        fn();
        ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
        for (const std::string& f : fragments)
            EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << " lacks " << f;
    }
}

// One sequence's reference: a shadow KV built from its own tokens.
struct Shadow {
    explicit Shadow(const Model& m) : kv(m.config()) {}
    ReferenceKv kv;
    int len = 0;
};

// Decodes one batch and returns the worst logit_error against the shadows.
double checked_step(PluginEngine& engine, const Model& model, const std::vector<int>& seqs,
                    const std::vector<int>& tokens, const std::vector<Shadow*>& shadows) {
    const std::vector<float> got = engine.decode(seqs, tokens);
    double worst = 0.0;
    const auto v = static_cast<std::size_t>(engine.vocab());
    for (std::size_t i = 0; i < seqs.size(); ++i) {
        const std::vector<float> want = reference_forward(model, shadows[i]->kv, tokens[i], shadows[i]->len++);
        worst = std::max(worst, logit_error(std::span<const float>(got).subspan(i * v, v), want));
    }
    return worst;
}

// Random serving traffic through the ABI, seed by seed: sequences open and
// close, decode in batches of several sequences, truncate, clear, copy and
// clear all; every row of logits is checked against the reference forward
// over that sequence's own history. Returns "" or the first failure, naming
// the seed and the op.
std::string random_ops_failure(PluginEngine& engine, const Model& model, std::uint64_t seeds) {
    constexpr int kSeqs = 4, kOps = 120, kCtx = 64;
    for (std::uint64_t seed = 0; seed < seeds; ++seed) {
        std::vector<std::optional<Shadow>> shadow(kSeqs);
        Rng rng(seed);
        for (int op = 0; op < kOps; ++op) {
            const int s = int(rng.below(kSeqs)), r = int(rng.below(100));
            const std::string where = "seed " + std::to_string(seed) + " op " + std::to_string(op);
            try {
                if (!shadow[s]) {
                    engine.apply(calls::Open{s});
                    shadow[s].emplace(model);
                } else if (r < 55) {  // a batch: open sequences with room, one token each
                    std::vector<int> seqs, tokens;
                    std::vector<Shadow*> shadows;
                    for (int q = 0; q < kSeqs; ++q)
                        if (shadow[q] && shadow[q]->len < kCtx && rng.chance(0.7)) {
                            seqs.push_back(q);
                            tokens.push_back(int(rng.below(std::uint64_t(model.config().vocab))));
                            shadows.push_back(&*shadow[q]);
                        }
                    if (!seqs.empty()) {
                        const double err = checked_step(engine, model, seqs, tokens, shadows);
                        if (!(err <= kDataTolerance)) return where + ": logit error " + std::to_string(err);
                    }
                } else if (r < 70) {
                    const int n = int(rng.below(std::uint64_t(shadow[s]->len) + 1));
                    engine.apply(calls::Truncate{s, n});
                    shadow[s]->len = n;
                } else if (r < 78) {
                    engine.apply(calls::Clear{s});
                    shadow[s].emplace(model);
                } else if (r < 88) {
                    const int d = int(rng.below(kSeqs));
                    if (d != s && shadow[d]) {
                        engine.apply(calls::Copy{s, d});
                        shadow[d] = shadow[s];
                    }
                } else if (r < 96) {
                    engine.apply(calls::Close{s});
                    shadow[s].reset();
                } else {
                    engine.apply(calls::ClearAll{});
                    for (auto& sh : shadow)
                        if (sh) sh.emplace(model);
                }
            } catch (const Error& e) {
                return where + ": " + e.what();
            }
        }
        for (int q = 0; q < kSeqs; ++q)
            if (shadow[q]) engine.apply(calls::Close{q});
    }
    return "";
}

// Writes `model` in the format the plugin asks for; returns the path, a new
// one each call: llama.cpp maps the file, so rewriting a path it loaded
// would change its weights underneath it.
std::string write_model(const PluginLibrary& library, const Model& model) {
    static int serial = 0;
    const std::string path =
        temp_path(cat("plugin-model-", serial++, ".", library.api().model_format).c_str());
    if (std::string(library.api().model_format) == "gguf")
        save_gguf(model, path);
    else
        save_llama2c(model, path);
    return path;
}

struct PluginCase {
    const char* name;
    const char* path;  // empty: not built here (llama.cpp absent)
};

void PrintTo(const PluginCase& c, std::ostream* os) { *os << c.name; }

#ifndef LLAMACPP_PLUGIN_PATH
#define LLAMACPP_PLUGIN_PATH ""
#endif

class Plugin : public ::testing::TestWithParam<PluginCase> {
protected:
    void SetUp() override {
        if (!*GetParam().path) KVWELD_WITHOUT_LLAMA(GetParam().name << " plugin not built (llama.cpp not found: scripts/setup)");
        library_ = PluginLibrary::open(GetParam().path);
        model_path_ = write_model(*library_, model_);
        engine_ = std::make_unique<PluginEngine>(library_, kvweld_engine_options{model_path_.c_str(), 64, 4, 1, nullptr, nullptr, nullptr, 0});
    }
    void TearDown() override {
        if (!model_path_.empty()) std::filesystem::remove(model_path_);
    }

    double step(const std::vector<int>& seqs, const std::vector<int>& tokens, const std::vector<Shadow*>& shadows) {
        return checked_step(*engine_, model_, seqs, tokens, shadows);
    }

    const Model model_ = Model::random(config_by_name("tiny"), 21);
    std::string model_path_;
    std::shared_ptr<const PluginLibrary> library_;
    std::unique_ptr<PluginEngine> engine_;
};

TEST_P(Plugin, InterleavedSequencesMatchTheReference) {
    EXPECT_EQ(engine_->name(), GetParam().name);
    EXPECT_EQ(engine_->vocab(), model_.config().vocab);
    engine_->apply(calls::Open{0});
    engine_->apply(calls::Open{1});
    Shadow a(model_), b(model_);
    Rng rng(5);
    double worst = 0.0;
    for (int i = 0; i < 20; ++i) {
        const int ta = int(rng.below(64)), tb = int(rng.below(64));
        worst = std::max(worst, step({0, 1}, {ta, tb}, {&a, &b}));
    }
    // Truncate one sequence and go on; clear the other and start again.
    engine_->apply(calls::Truncate{0, 7});
    a.len = 7;
    engine_->apply(calls::Clear{1});
    b = Shadow(model_);
    for (int i = 0; i < 10; ++i) worst = std::max(worst, step({1, 0}, {i, 2 * i}, {&b, &a}));
    EXPECT_LE(worst, kDataTolerance);
    const auto counters = engine_->counters();
    ASSERT_TRUE(counters.has_value());
    if (engine_->name() == "kvweld") {
        EXPECT_EQ(counters->builds, 2u);  // one plan per sequence, kept through truncate; clear rebinds
        EXPECT_EQ(counters->rebound, 1u);
        EXPECT_EQ(counters->builds + counters->reused + counters->rebound, 60u);
    } else if (engine_->name() == "kvweld-paged") {
        EXPECT_EQ(counters->builds, 1u);  // one plan for the pool: truncate and clear keep it
        EXPECT_EQ(counters->rebound, 0u);
        EXPECT_EQ(counters->reused, 59u);
    } else {
        EXPECT_GT(counters->reused, 0u);  // llama.cpp kept its graph across same-shape batches
    }
}

TEST_P(Plugin, CopiedSequenceContinuesLikeItsSource) {
    engine_->apply(calls::Open{0});
    engine_->apply(calls::Open{2});
    for (int t : {3, 1, 4, 1, 5}) engine_->decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{t});
    engine_->apply(calls::Copy{0, 2});
    const std::vector<float> both = engine_->decode(std::vector<std::int32_t>{0, 2}, std::vector<std::int32_t>{9, 9});
    const auto v = static_cast<std::size_t>(engine_->vocab());
    EXPECT_EQ(std::vector<float>(both.begin(), both.begin() + long(v)), std::vector<float>(both.begin() + long(v), both.end()));
}

TEST_P(Plugin, BadCallsAreErrorsThatNameTheProblem) {
    expect_error([&] { engine_->decode(std::vector<std::int32_t>{3}, std::vector<std::int32_t>{1}); },
                 {GetParam().name, "decode failed", "sequence 3 is not open"});
    engine_->apply(calls::Open{0});
    expect_error([&] { engine_->apply(calls::Open{0}); }, {"already open"});
    expect_error([&] { engine_->apply(calls::Open{9}); }, {"out of range"});
    expect_error([&] { engine_->apply(calls::Truncate{0, 5}); }, {"truncate failed", "truncate_to(5)"});
    expect_error([&] { engine_->decode(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{64}); },
                 {"token 64 out of range"});
    // The refused calls changed nothing: sequence 0 still decodes from position 0.
    Shadow a(model_);
    EXPECT_LE(step({0}, {5}, {&a}), kDataTolerance);
    expect_error([&] { PluginEngine(library_, kvweld_engine_options{"/nonexistent.bin", 64, 4, 1, nullptr, nullptr, nullptr, 0}); },
                 {"create failed", "/nonexistent.bin"});
}

// Reload (KVWELD_CAP_RELOAD): sequences stay open and start over on the new
// weights; a model of another shape is refused and loses nothing.
TEST_P(Plugin, ReloadEmptiesSequencesAndRefusesAnotherShape) {
    ASSERT_TRUE(engine_->capabilities() & KVWELD_CAP_RELOAD);
    engine_->apply(calls::Open{0});
    Shadow a(model_);
    for (int t : {3, 1, 4}) EXPECT_LE(step({0}, {t}, {&a}), kDataTolerance);
    const Model next = Model::random(config_by_name("tiny"), 99);
    engine_->apply(calls::Reload{&next});
    Shadow b(next);
    double worst = 0.0;
    for (int t : {5, 9, 2}) worst = std::max(worst, checked_step(*engine_, next, {0}, {t}, {&b}));
    EXPECT_LE(worst, kDataTolerance);
    const Model other = Model::random(config_by_name("tiny-mha"), 1);
    expect_error([&] { engine_->apply(calls::Reload{&other}); },
                 {"reload failed", "another shape"});
    EXPECT_LE(checked_step(*engine_, next, {0}, {7}, {&b}), kDataTolerance);  // still the reloaded model, position 3
}

// Storage identity, KV read-back and layer swaps, where declared: the
// serials change exactly where the storage does, the rows read back are the
// reference's, and bad arguments are errors naming the value and the limit.
TEST_P(Plugin, StorageReportsAndKvReadsWhereDeclared) {
    const std::uint32_t want = KVWELD_CAP_STORAGE | KVWELD_CAP_READ_KV | KVWELD_CAP_SWAP_LAYER;
    if ((engine_->capabilities() & want) != want) GTEST_SKIP() << GetParam().name << " declares none of them";
    const int n = model_.config().n_layers, kv_dim = model_.config().kv_dim();
    engine_->apply(calls::Open{0});
    Shadow a(model_);
    for (int t : {3, 1, 4}) EXPECT_LE(step({0}, {t}, {&a}), kDataTolerance);
    const auto held = engine_->storage(0, KVWELD_STORAGE_HELD, n);
    EXPECT_EQ(engine_->storage(0, KVWELD_STORAGE_PLAN, n), held);
    std::vector<float> k(static_cast<std::size_t>(kv_dim)), v(static_cast<std::size_t>(kv_dim));
    engine_->read_kv(0, 1, 2, k, v);
    EXPECT_LE(logit_error(k, std::span<const float>(a.kv.key[1]).subspan(2 * std::size_t(kv_dim), std::size_t(kv_dim))),
              kDataTolerance);
    engine_->apply(calls::SwapLayer{0, 1});
    const auto swapped = engine_->storage(0, KVWELD_STORAGE_HELD, n);
    EXPECT_EQ(swapped[0], held[0]);
    EXPECT_NE(swapped[1], held[1]);
    engine_->apply(calls::Truncate{0, 1});
    EXPECT_EQ(engine_->storage(0, KVWELD_STORAGE_HELD, n), swapped);
    expect_error([&] { engine_->storage(0, KVWELD_STORAGE_HELD, n + 1); }, {"layers asked for"});
    expect_error([&] { engine_->read_kv(0, 0, 1, k, v); }, {"position 1 out of range 0..0"});
    expect_error([&] { engine_->read_kv(0, n, 0, k, v); }, {"layer", "out of range"});
    expect_error([&] { engine_->apply(calls::SwapLayer{0, -1}); }, {"layer -1 out of range"});
}

// Paged KV (KVWELD_CAP_BLOCKS, KVWELD_CAP_POOL_OPS), where declared: a
// pool that starts with one block grows (a new storage serial, the plan
// rebound to it, not rebuilt); a copy shares blocks (counts of 2), its
// first write copies the shared block; compaction keeps the data and the
// plan; bad arguments are errors naming the value.
TEST_P(Plugin, PagedPoolReportsBlocksAndGrows) {
    const std::uint32_t want = KVWELD_CAP_BLOCKS | KVWELD_CAP_POOL_OPS;
    if ((engine_->capabilities() & want) != want) GTEST_SKIP() << GetParam().name << " has no paged KV pool";
    engine_ = std::make_unique<PluginEngine>(
        library_, kvweld_engine_options{model_path_.c_str(), 64, 4, 1, nullptr, "block=4,blocks=1", nullptr, 0});
    const kvweld_pool_info start = engine_->pool_info();
    EXPECT_EQ(start.block_size, 4);
    EXPECT_EQ(start.n_blocks, 1);
    EXPECT_EQ(start.plan_storage, 0u);  // no plan yet
    engine_->apply(calls::Open{0});
    Shadow a(model_);
    for (int t : {3, 1, 4, 1, 5, 9}) EXPECT_LE(step({0}, {t}, {&a}), kDataTolerance);  // 6 positions: a second block
    const kvweld_pool_info grown = engine_->pool_info();
    EXPECT_EQ(grown.n_blocks, 2);
    EXPECT_NE(grown.storage, start.storage);
    EXPECT_EQ(grown.plan_storage, grown.storage);
    auto counters = engine_->counters();
    EXPECT_EQ(counters->builds, 1u);
    EXPECT_EQ(counters->rebound, 1u);
    EXPECT_EQ(engine_->block_table(0).size(), 2u);
    engine_->apply(calls::Open{1});
    engine_->apply(calls::Copy{0, 1});
    EXPECT_EQ(engine_->block_table(1), engine_->block_table(0));
    EXPECT_EQ(engine_->block_refcount(engine_->block_table(0)[1]), 2);
    Shadow b = a;
    EXPECT_LE(step({1}, {2}, {&b}), kDataTolerance);  // position 6, in the shared block: copied first
    EXPECT_EQ(engine_->pool_info().n_blocks, 4);    // both blocks were in use: the copy needed a grow
    EXPECT_NE(engine_->block_table(1)[1], engine_->block_table(0)[1]);
    EXPECT_EQ(engine_->block_refcount(engine_->block_table(0)[1]), 1);
    engine_->apply(calls::Close{0});
    engine_->apply(calls::PoolOp{KVWELD_POOL_COMPACT});
    EXPECT_EQ(engine_->pool_info().storage, engine_->pool_info().plan_storage);  // compaction keeps the storage
    EXPECT_LE(step({1}, {6}, {&b}), kDataTolerance);
    counters = engine_->counters();
    EXPECT_EQ(counters->builds, 1u);
    EXPECT_EQ(counters->rebound, 2u);  // one per grow; copy, close and compaction kept the plan
    expect_error([&] { engine_->block_refcount(99); }, {"block 99 out of range"});
    expect_error([&] { engine_->block_table(0); }, {"sequence 0 is not open"});
    expect_error([&] { engine_->apply(calls::PoolOp{7}); }, {"op 7"});
    expect_error([&] { PluginEngine(library_, kvweld_engine_options{model_path_.c_str(), 64, 4, 1, nullptr, "block=3", nullptr, 0}); },
                 {"block=3", "power of two"});
}

// ABI 12, the abort callback. Two sequences, twelve tokens each, in one
// call, armed to stop at several points: a call it stops throws Aborted,
// each sequence keeps a prefix of its tokens (read back with seq_length),
// and decoding goes on from there, every row the reference's; one armed
// past the call's questions is an ordinary call. The tokens a stopped
// call did not keep are fed again in the same order (as a server retries
// the step: llama.cpp may then reuse the graph of the ubatch it stopped
// in). llama.cpp is asked after
// each graph node, with ubatches of 4 tokens here; kvweld before each token.
// `lie`: positions added to what the engine reports, as an engine that
// counts a token it never wrote would (the check must then fail).
std::string abort_failure(PluginEngine& engine, const Model& model, int* partial, int* none_kept, std::string* log,
                          int lie = 0) {
    const std::vector<int> afters = {0, 1, 3, 7, 40, 150, 600, 1 << 30};
    for (int after : afters) {
        engine.apply(calls::Open{0});
        engine.apply(calls::Open{1});
        Shadow a(model), b(model);
        std::vector<Shadow*> shadows = {&a, &b};
        const std::string where = cat("after ", after, ": ");
        if (double e = checked_step(engine, model, {0, 1}, {5, 6}, shadows); e > kDataTolerance)
            return where + cat("the first decode is off by ", e);
        std::vector<int> seqs, tokens;
        for (int i = 0; i < 12; ++i)
            for (int s : {0, 1}) {
                seqs.push_back(s);
                tokens.push_back((7 * i + 3 * s) % 64);
            }
        engine.set_abort(after);
        bool aborted = false;
        try {
            engine.decode(seqs, tokens);
        } catch (const Aborted&) {
            aborted = true;
        }
        int kept_total = 0;
        std::vector<int> rest_seqs, rest_tokens;  // what the call did not keep, as a server retries it
        std::vector<Shadow*> rest_shadows;
        for (int s : {0, 1}) {
            Shadow& sh = *shadows[std::size_t(s)];
            const int kept = engine.seq_length(s) + lie - sh.len;
            if (kept < 0 || kept > 12 || (!aborted && kept != 12))
                return where + cat("sequence ", s, " kept ", kept, " of its 12 tokens (", aborted ? "" : "not ", "aborted)");
            for (int i = 0; i < kept; ++i) reference_forward(model, sh.kv, tokens[std::size_t(2 * i + s)], sh.len++);
            kept_total += kept;
        }
        for (int i = 0; i < 12; ++i)
            for (int s : {0, 1})
                if (i >= shadows[std::size_t(s)]->len - 1) {
                    rest_seqs.push_back(s);
                    rest_tokens.push_back(tokens[std::size_t(2 * i + s)]);
                    rest_shadows.push_back(shadows[std::size_t(s)]);
                }
        if (!rest_seqs.empty())
            if (double e = checked_step(engine, model, rest_seqs, rest_tokens, rest_shadows); e > kDataTolerance)
                return where + cat("the call's ", rest_seqs.size(), " tokens it did not keep, fed again, are off by ", e);
        *log += cat(" after ", after, ": ", aborted ? cat("aborted, kept ", kept_total) : std::string("ran"), ";");
        *partial += aborted && kept_total > 0 && kept_total < 24;
        *none_kept += aborted && kept_total == 0;
        if (after == (1 << 30) && aborted) return where + "aborted a call it should not have stopped";
        for (int i = 0; i < 6; ++i)
            if (double e = checked_step(engine, model, {1, 0}, {i, 2 * i + 1}, {&b, &a}); e > kDataTolerance)
                return where + cat("decode ", i, " after the call is off by ", e);
        engine.apply(calls::Close{0});
        engine.apply(calls::Close{1});
    }
    return "";
}

TEST_P(Plugin, AnAbortedDecodeKeepsAPrefixAndTheNextDecodesAreRight) {
    if (!(engine_->capabilities() & KVWELD_CAP_ABORT)) GTEST_SKIP() << GetParam().name << " has no abort callback";
    // llama.cpp: ubatches of 4, per-stream and unified KV.
    const std::vector<std::string> settings =
        engine_->name() == "llamacpp" ? std::vector<std::string>{"n_ubatch=4,kv_unified=0", "n_ubatch=4,kv_unified=1"}
                                      : std::vector<std::string>{""};
    int partial = 0, none_kept = 0;
    for (const std::string& params : settings) {
        PluginEngine engine(library_, kvweld_engine_options{model_path_.c_str(), 64, 4, 1, nullptr, params.c_str(), nullptr, 0});
        std::string log;
        EXPECT_EQ(abort_failure(engine, model_, &partial, &none_kept, &log), "") << params;
        std::cout << GetParam().name << " " << params << ":" << log << "\n";
    }
    EXPECT_GE(partial, 1) << "no call was stopped part way";
    EXPECT_GE(none_kept, 1) << "no call was stopped before its first ubatch";
    // The other half: the same check, told one position more than the
    // engine kept after each stop, fails.
    PluginEngine told_more(library_, kvweld_engine_options{model_path_.c_str(), 64, 4, 1, nullptr, settings[0].c_str(), nullptr, 0});
    std::string log;
    const std::string caught = abort_failure(told_more, model_, &partial, &none_kept, &log, 1);
    std::cout << "told one more: " << caught << "\n";
    EXPECT_NE(caught, "") << "a length one past what was kept went unseen";
}

TEST_P(Plugin, RandomOpsAgreeWithTheReference) {
    EXPECT_EQ(random_ops_failure(*engine_, model_, 50), "");
}

INSTANTIATE_TEST_SUITE_P(Engines, Plugin,
                         ::testing::Values(PluginCase{"kvweld", KVWELD_PLUGIN_PATH},
                                           PluginCase{"kvweld-paged", KVWELD_PAGED_PLUGIN_PATH},
                                           PluginCase{"llamacpp", LLAMACPP_PLUGIN_PATH}),
                         [](const auto& info) {
                             std::string name = info.param.name;
                             std::replace(name.begin(), name.end(), '-', '_');  // gtest names are identifiers
                             return name;
                         });

// llama.cpp's settings that no seed draws, each checked through the ABI.
class LlamaCppPlugin : public ::testing::Test {
protected:
    void SetUp() override {
        if (!*LLAMACPP_PLUGIN_PATH) KVWELD_WITHOUT_LLAMA("llama.cpp plugin not built (llama.cpp not found: scripts/setup)");
        library_ = PluginLibrary::open(LLAMACPP_PLUGIN_PATH);
        model_path_ = write_model(*library_, model_);
    }
    void TearDown() override {
        if (!model_path_.empty()) std::filesystem::remove(model_path_);
    }
    // n_ctx positions per sequence, 4 sequences.
    std::unique_ptr<PluginEngine> engine(const char* params, int n_ctx = 64) const {
        return std::make_unique<PluginEngine>(library_,
                                              kvweld_engine_options{model_path_.c_str(), n_ctx, 4, 1, nullptr, params, nullptr, 0});
    }
    const Model model_ = Model::random(config_by_name("tiny"), 21);
    std::string model_path_;
    std::shared_ptr<const PluginLibrary> library_;
};

// kv_cells: one cache of 256 cells all sequences share. A call that fills
// it exactly is taken; one token more is refused, naming the cells, and
// (llama.h) the memory is as before the call: once room is made, every
// sequence decodes on as the reference says, the refused token in none.
TEST_F(LlamaCppPlugin, AFullCacheRefusesTheCallAndKeepsWhatItHeld) {
    expect_error([&] { engine("kv_cells=256"); }, {"kv_cells=256", "needs kv_unified=1"});
    expect_error([&] { engine("kv_unified=1,kv_cells=5000", 256); }, {"kv_cells=5000", "1..1024"});
    const auto e = engine("kv_unified=1,kv_cells=256", 256);
    Shadow a(model_), b(model_), c(model_);
    for (int s : {0, 1, 2}) e->apply(calls::Open{s});
    const auto prefill = [&](int seq, Shadow& shadow, int n) {
        std::vector<int> seqs(std::size_t(n), seq), tokens;
        for (int i = 0; i < n; ++i) tokens.push_back((seq * 7 + i * 5) % model_.config().vocab);
        return checked_step(*e, model_, seqs, tokens, std::vector<Shadow*>(std::size_t(n), &shadow));
    };
    EXPECT_LE(prefill(0, a, 200), kDataTolerance);
    EXPECT_LE(prefill(1, b, 56), kDataTolerance);  // 256 of 256: full, and taken
    expect_error([&] { e->decode(std::vector<int>{2}, std::vector<int>{3}); },
                 {"the KV cache is full", "llama_decode returned 1", "1 tokens in 256 cells, 256 held"});
    EXPECT_EQ(e->seq_length(2), 0);
    EXPECT_EQ(e->seq_length(0), 200);
    e->apply(calls::Truncate{1, 40});
    b.len = 40;
    EXPECT_LE(checked_step(*e, model_, {0, 2, 1}, {1, 2, 3}, {&a, &c, &b}), kDataTolerance);
    EXPECT_LE(checked_step(*e, model_, {2, 0}, {4, 5}, {&c, &a}), kDataTolerance);
}

// allow_reuse's tokens-per-sequence term (llama-graph.h:823), which only a
// split with the same token count can reach: with one stream per sequence
// a call of 4 sequences x 1 token and one of 2 x 2 are both 4 tokens, and
// the second builds; the same 2 x 2 call again reuses the graph.
TEST_F(LlamaCppPlugin, TheSameTokenCountInAnotherSplitBuildsAndTheSameSplitReuses) {
    const auto e = engine("kv_unified=0");
    for (int s = 0; s < 4; ++s) e->apply(calls::Open{s});
    const auto reused = [&] { return e->counters()->reused; };
    e->decode(std::vector<int>{0, 1, 2, 3}, std::vector<int>{1, 2, 3, 4});
    e->decode(std::vector<int>{0, 1, 2, 3}, std::vector<int>{5, 6, 7, 8});
    const auto after_same = reused();
    EXPECT_GE(after_same, 1u) << "4 x 1 after 4 x 1 reuses";
    e->decode(std::vector<int>{0, 0, 1, 1}, std::vector<int>{1, 2, 3, 4});
    EXPECT_EQ(reused(), after_same) << "2 x 2 after 4 x 1: 4 tokens, another split, a new graph";
    e->decode(std::vector<int>{0, 0, 1, 1}, std::vector<int>{5, 6, 7, 8});
    EXPECT_EQ(reused(), after_same + 1) << "2 x 2 after 2 x 2 reuses";
}

// pooling=mean|last: read_embeddings gives each row its sequence's tokens
// of the call pooled, the same as pooling the per-token embeddings of a
// context with pooling none (llama.cpp's own, read through the same ABI);
// the two poolings differ, so neither check holds by accident.
//
// With one KV stream per sequence (kv_unified=0) mean pooling is wrong, a
// finding of llama.cpp (pooled-split, targets/llamacpp/known_findings):
// split_equal puts a call whose
// sequences feed unequal token counts in several ubatches
// (src/llama-kv-cache.cpp:713), and decode writes each ubatch's pooled
// embedding over the one before (embd_seq_out[seq_id], src/
// llama-context.cpp:1976-1987). Here sequence 0 feeds 3 tokens and 1 feeds
// 2: the first ubatch takes 2 of each, the second sequence 0's third, so
// sequence 0's "mean" is its last token's embedding. The test pins that:
// when a release fixes it, it fails, and the finding is closed.
TEST_F(LlamaCppPlugin, PooledEmbeddingsPoolTheSequencesTokensOfTheCall) {
    expect_error([&] { engine("pooling=max"); }, {"pooling=max", "none, mean or last"});
    const std::vector<int> seqs = {0, 1, 0, 0, 1}, tokens = {3, 9, 4, 5, 11};
    const int dim = model_.config().dim;
    // Per engine, per call (two: the second continues both sequences), each row's embedding.
    const auto rows = [&](const char* params) {
        const auto e = engine(params);
        e->apply(calls::Open{0});
        e->apply(calls::Open{1});
        e->apply(calls::SetLive{"embeddings", "1"});
        std::vector<std::vector<std::vector<float>>> out;
        for (int call = 0; call < 2; ++call) {
            e->decode(seqs, tokens);
            out.emplace_back();
            for (std::size_t r = 0; r < seqs.size(); ++r) out.back().push_back(e->embeddings(int(r), dim));
        }
        return out;
    };
    // Mean pooling where llama.cpp aborts in a reserve (3 sequences of 200
    // positions: 3 does not divide min(600, 512); the reserve comes at the
    // first decode after a control vector is set), in a process of its own:
    // a crash named by its assert, the finding pooled-mean-reserve-abort.
    {
        PluginEngine three(library_, kvweld_engine_options{model_path_.c_str(), 200, 3, 1, nullptr, "pooling=mean", nullptr, 0}, 60000);
        three.apply(calls::Open{0});
        three.apply(calls::SetLive{"embeddings", "1"});
        const ControlVector cvec = ControlVector::random(model_.config(), 5, 1, 1);
        three.apply(calls::SetCvec{&cvec, nullptr, nullptr});
        try {
            three.decode(std::vector<int>{0}, std::vector<int>{3});
            ADD_FAILURE() << "pooling=mean with 3 sequences decoded after a reserve: pooled-mean-reserve-abort is fixed";
        } catch (const Crashed& c) {
            EXPECT_EQ(c.title, "SIGABRT: GGML_ASSERT(ggml_can_mul_mat(a, b)) failed") << c.what();
        }
    }
    const auto none = rows("pooling=none"), mean = rows("kv_unified=1,pooling=mean"),
               last = rows("kv_unified=1,pooling=last"), split_mean = rows("kv_unified=0,pooling=mean");
    double mean_vs_last = 0.0, split_off = 0.0;
    for (std::size_t call = 0; call < 2; ++call)
        for (std::size_t r = 0; r < seqs.size(); ++r) {
            std::vector<float> want_mean(std::size_t(dim), 0.0f), want_last;
            int n = 0;
            for (std::size_t q = 0; q < seqs.size(); ++q)
                if (seqs[q] == seqs[r]) {
                    for (int k = 0; k < dim; ++k) want_mean[std::size_t(k)] += none[call][q][std::size_t(k)];
                    want_last = none[call][q];
                    ++n;
                }
            for (float& x : want_mean) x /= float(n);
            EXPECT_LE(logit_error(mean[call][r], want_mean), 1e-5) << "call " << call << " row " << r;
            EXPECT_LE(logit_error(last[call][r], want_last), 1e-5) << "call " << call << " row " << r;
            mean_vs_last = std::max(mean_vs_last, logit_error(mean[call][r], last[call][r]));
            // The finding: sequence 1 (one ubatch) is right, sequence 0 gets its last ubatch's token.
            EXPECT_LE(logit_error(split_mean[call][r], seqs[r] == 0 ? want_last : want_mean), 1e-5)
                << "call " << call << " row " << r << ": kv_unified=0 mean pooling is no longer as the finding says";
            if (seqs[r] == 0) split_off = std::max(split_off, logit_error(split_mean[call][r], want_mean));
        }
    EXPECT_GT(mean_vs_last, 1e-3);
    EXPECT_GT(split_off, 1e-3);
}

// The other half, through the ABI: kvweld's plugin with a fault switch on
// (the ABI's `faults` option) is caught by the same random traffic; a
// plugin without fault switches refuses them.
TEST(PluginFaults, RandomOpsCatchThem) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const Model model = Model::random(config_by_name("tiny"), 21);
    const auto library = PluginLibrary::open(KVWELD_PLUGIN_PATH);
    const std::string path = write_model(*library, model);
    for (const char* fault : {"no_remint_on_clear", "offset_not_rebound", "partial_rebind"}) {
        PluginEngine engine(library, kvweld_engine_options{path.c_str(), 64, 4, 1, fault, nullptr, nullptr, 0});
        const std::string failure = random_ops_failure(engine, model, 50);
        std::printf("%s: %s\n", fault, failure.empty() ? "not caught" : failure.c_str());
        EXPECT_NE(failure, "") << fault;
    }
    // A fault this engine does not list (the simulator's scheduler fault, a
    // paged one) is refused by name, as an unknown one is.
    for (const char* fault : {"spec_reject_off_by_one", "cow_skipped"})
        expect_error([&] { PluginEngine(library, kvweld_engine_options{path.c_str(), 64, 4, 1, fault, nullptr, nullptr, 0}); },
                     {cat("unknown fault '", fault, "'"), "this engine's faults are"});
    expect_error([&] { PluginEngine(library, kvweld_engine_options{path.c_str(), 64, 4, 1, "no_such_fault", nullptr, nullptr, 0}); },
                 {"unknown fault 'no_such_fault'"});
    expect_error([&] { PluginEngine(library, kvweld_engine_options{path.c_str(), 64, 4, 1, nullptr, "threads=2", nullptr, 0}); },
                 {"setting 'threads=2'", "expected key=value with a key among: policy, backend, reuse"});
    // ABI 15: the host checks params against the settings the plugin
    // declared, before create, naming the values a setting takes.
    expect_error([&] { PluginEngine(library, kvweld_engine_options{path.c_str(), 64, 4, 1, nullptr, "policy=bogus", nullptr, 0}); },
                 {"engine kvweld: setting 'policy=bogus': policy takes rebind, rebuild"});
    expect_error([&] { PluginEngine(library, kvweld_engine_options{path.c_str(), 64, 4, 1, nullptr, "reuse=0,reuse=1", nullptr, 0}); },
                 {"setting 'reuse=1': reuse is given twice"});
    if (*LLAMACPP_PLUGIN_PATH) {
        const auto llama = PluginLibrary::open(LLAMACPP_PLUGIN_PATH);
        const std::string gguf = write_model(*llama, model);
        expect_error([&] { PluginEngine(llama, kvweld_engine_options{gguf.c_str(), 64, 4, 1, "no_remint_on_clear", nullptr, nullptr, 0}); },
                     {"unknown fault 'no_remint_on_clear'", "truncate_one_short"});
        expect_error([&] { PluginEngine(llama, kvweld_engine_options{gguf.c_str(), 64, 4, 1, nullptr, "kv_unified=2", nullptr, 0}); },
                     {"kv_unified=2: must be 0 or 1"});
        expect_error([&] { PluginEngine(llama, kvweld_engine_options{gguf.c_str(), 64, 4, 1, nullptr, "flash=1", nullptr, 0}); },
                     {"setting 'flash=1'", "kv_unified, graph_reuse"});
        std::filesystem::remove(gguf);
    }
    std::filesystem::remove(path);
}

// Version 4: each fault a plugin lists carries the classes its failures
// may show as, and they parse; kvweld's own come from the engine's table.
TEST(PluginFaultClasses, EveryBuiltinPluginDeclaresThem) {
    for (const char* path : {KVWELD_PLUGIN_PATH, KVWELD_PAGED_PLUGIN_PATH, LLAMACPP_PLUGIN_PATH}) {
        if (!*path) continue;
        const auto library = PluginLibrary::open(path);
        const auto listed = abi::split_fault_list(library->api().fault_names);
        EXPECT_EQ(listed.empty(), !kFaultsCompiled && std::string(library->api().name) != "llamacpp") << path;
        for (const abi::ListedFault& f : listed) {
            ASSERT_FALSE(f.classes.empty()) << path << ": " << f.name;
            EXPECT_FALSE(Detections::parse(f.classes).empty()) << f.name;
            for (const FaultInfo& info : all_faults())
                if (info.name == f.name) {
                    EXPECT_EQ(f.classes, info.expected.describe()) << f.name;
                }
        }
    }
}

// ABI 14: a plugin newer than the host loads, read up to the host's own
// table; the capabilities the host does not know are dropped.
TEST(PluginTable, NewerThanTheHostLoadsBySize) {
    const auto newer = PluginLibrary::open(BROKEN_PLUGIN_14);
    EXPECT_EQ(newer->api().abi_version, KVWELD_ENGINE_ABI_VERSION + 1);
    EXPECT_EQ(newer->api().capabilities, 0u);
    EXPECT_EQ(newer->api().struct_size, sizeof(kvweld_engine_api));
    EXPECT_EQ(newer->api().keep_seq, nullptr);
}

// kvweld's own plugin is read whole, its version 14 field included, and
// its version 15 settings become the lists the host reads.
TEST(PluginTable, TheKvweldPluginIsReadWhole) {
    const auto library = PluginLibrary::open(KVWELD_PLUGIN_PATH);
    EXPECT_EQ(library->api().struct_size, sizeof(kvweld_engine_api));
    EXPECT_NE(library->api().keep_seq, nullptr);
    EXPECT_TRUE(library->api().capabilities & KVWELD_CAP_KEEP);
    const PluginSettings& s = library->settings();
    EXPECT_TRUE(s.declared);
    EXPECT_EQ(std::string(library->api().live_settings), "n_threads:1|2,embeddings:0|1,causal_attn:0|1");
    ASSERT_EQ(s.params.size(), 3u);
    EXPECT_EQ(s.params[0].key, "policy");
    EXPECT_EQ(s.params[0].values, (std::vector<std::string>{"rebind", "rebuild"}));
    EXPECT_EQ(s.params_problem("policy=rebuild,backend=cpu,reuse=0"), "");
    EXPECT_NE(s.params_problem("backend=tpu").find("backend takes cpu, cuda"), std::string::npos);
    // The fault list comes from the settings, each fault with its classes
    // (none in a build without fault switches, the asan preset's).
    const std::string faults = library->api().fault_names;
    if (kFaultsCompiled) EXPECT_NE(faults.find("no_remint_on_clear:"), std::string::npos) << faults;
    else EXPECT_EQ(faults, "");
    // A table of the text lists (the crashing plugin's) declares none: params are the plugin's to check.
    const auto crashing = PluginLibrary::open(CRASHING_PLUGIN);
    EXPECT_FALSE(crashing->settings().declared);
    EXPECT_EQ(crashing->settings().params_problem("anything=at_all"), "");
}

// ABI 16: the run's faults and params reach create_v16 as data, and read
// back the same; a plugin before 16 gets the text.
TEST(PluginTable, SettingsAreGivenAsData) {
    const GivenSettings given = GivenSettings::from_text("a,b", "k=v,x=1");
    const kvweld_engine_options base{"m", 8, 1, 1, nullptr, nullptr, nullptr, 0};
    const kvweld_engine_options v16 = given.options_for(base, true);
    EXPECT_EQ(v16.faults, nullptr);
    EXPECT_EQ(v16.params, nullptr);
    ASSERT_EQ(v16.n_given, 4);
    const abi::Given back = abi::read_given(&v16);
    EXPECT_EQ(back.faults, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(back.params, (std::map<std::string, std::string>{{"k", "v"}, {"x", "1"}}));
    const kvweld_engine_options text = given.options_for(base, false);
    EXPECT_EQ(std::string(text.faults), "a,b");
    EXPECT_EQ(std::string(text.params), "k=v,x=1");
    EXPECT_EQ(text.given, nullptr);
    expect_error([] { GivenSettings::from_text("", "policy"); }, {"setting 'policy': expected key=value"});
    // A broken host's entries are refused naming them.
    const kvweld_given twice[] = {{KVWELD_SETTING_PARAM, "k", "1"}, {KVWELD_SETTING_PARAM, "k", "2"}};
    const kvweld_given valued_fault[] = {{KVWELD_SETTING_FAULT, "f", "1"}};
    kvweld_engine_options bad = base;
    bad.given = twice, bad.n_given = 2;
    EXPECT_THROW(
        {
            try {
                abi::read_given(&bad);
            } catch (const std::runtime_error& e) {
                EXPECT_NE(std::string(e.what()).find("param k given twice"), std::string::npos) << e.what();
                throw;
            }
        },
        std::runtime_error);
    bad.given = valued_fault, bad.n_given = 1;
    EXPECT_THROW(abi::read_given(&bad), std::runtime_error);
    // Every plugin of this repository takes them so, and so leaves create
    // empty for a host before 16 to refuse.
    for (const char* path : {KVWELD_PLUGIN_PATH, KVWELD_PAGED_PLUGIN_PATH}) {
        const auto library = PluginLibrary::open(path);
        EXPECT_NE(library->api().create_v16, nullptr) << path;
        EXPECT_EQ(library->api().create, nullptr) << path;
    }
}

TEST(BrokenPlugins, AreRefusedWithTheReason) {
    expect_error([] { PluginLibrary::open("/nonexistent/plugin.so"); }, {"/nonexistent/plugin.so", "cannot load"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_4); }, {"has no symbol 'kvweld_engine_entry'"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_1); },
                 {"ABI version 1,", cat("speaks versions 2..", KVWELD_ENGINE_ABI_VERSION), "read by their struct_size"});
    // ABI 14: a table is read by its size, which must reach past struct_size.
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_12); },
                 {"says its table is 4 bytes (struct_size)", cat("a version ", KVWELD_ENGINE_ABI_VERSION, " table is at least")});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_13); }, {"declares a capability whose function is empty"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_15); }, {"ships 1 of the rule's 5 functions", "all or none"});
    // ABI 15: settings as data, or as the text lists, not both; a live
    // setting has values to draw.
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_16); }, {"describes its settings twice"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_17); },
                 {"lists live setting 'n_threads' with no values a swarm may draw"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_2); }, {"required function"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_5); },
                 {"fault 'lies' with bad classes", "'wrong_answer'", "stale_decode, spurious_invalidation"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_6); }, {"version 4 capability in an older table"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_7); }, {"lists live settings (n_threads:1|2)", "set_live empty"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_8); },
                 {"declares KVWELD_CAP_EMBEDDINGS but lists no live setting 'embeddings'"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_9); }, {"declares a capability whose function is empty"});
    expect_error([] { PluginLibrary::open(BROKEN_PLUGIN_10); }, {"declares a capability whose function is empty"});
    const auto failing = PluginLibrary::open(BROKEN_PLUGIN_3);
    expect_error([&] { PluginEngine(failing, kvweld_engine_options{"x", 8, 1, 1, nullptr, nullptr, nullptr, 0}); },
                 {"engine broken: create failed: no model here"});
    // ABI 13: an engine's own live settings must be a part of its plugin's list.
    const PluginEngine beyond(PluginLibrary::open(BROKEN_PLUGIN_11), kvweld_engine_options{"x", 8, 1, 1, nullptr, nullptr, nullptr, 0});
    expect_error([&] { beyond.live_settings(); },
                 {"live_settings_of lists n_threads:8, which its plugin's list (n_threads:1|2) does not"});
}

}  // namespace
}  // namespace kvweld::targets
