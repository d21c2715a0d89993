// llama-server's host-RAM prompt cache as the oracles model it
// (sim/server/prompt_cache.hpp): the cache's own rules, the slot choice
// that decides when it is used, and the oracles following a prompt through
// it, each shown on the answer it must pass and the one it must not.
#include "sim/server/prompt_cache.hpp"
#include "sim/server/server_oracles.hpp"

#include "engine/reference.hpp"
#include "sim/tests/server_test_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

// A namespace of its own: the unity build puts this file beside server_oracles_test.cpp.
namespace kvweld::sim::server::prompt_cache_test {
namespace {

struct State {
    std::vector<int> tokens;
    void clear() { tokens.clear(); }
};

using test::answer;
using test::request;
using test::plain_settings;
using test::kTestCtx;

std::vector<int> run_of(int from, int n) {
    std::vector<int> v(static_cast<std::size_t>(n));
    std::iota(v.begin(), v.end(), from);
    return v;
}

TEST(PromptCache, KeepsNoPromptTwiceAndDropsTheOnesANewEntryHoldsWhole) {
    PromptCacheModel<State> ram({8192, false, false, 256});
    EXPECT_TRUE(ram.save({{1, 2, 3}}));
    EXPECT_FALSE(ram.save({{1, 2}}));  // entry 1 2 3 holds it whole
    EXPECT_FALSE(ram.save({{}}));
    EXPECT_TRUE(ram.save({{1, 2, 3, 4}}));  // 1 2 3 goes
    const auto got = ram.load({}, {1, 2, 3, 4, 5});
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->tokens, (std::vector<int>{1, 2, 3, 4}));
    EXPECT_FALSE(ram.load({}, {1, 2, 3, 4, 5}).has_value());  // a load takes the entry out
}

// A load needs a quarter of the entry kept, and more kept and more of the
// prompt covered than the slot's own prompt gives.
TEST(PromptCache, LoadsOnlyAnEntryBetterThanTheSlotsOwn) {
    PromptCacheModel<State> ram({8192, false, false, 256});
    ram.save({run_of(1, 8)});
    EXPECT_FALSE(ram.load({}, {1, 50, 51}).has_value());               // 1 of 8 kept: under a quarter
    EXPECT_FALSE(ram.load({1, 2, 3}, {1, 2, 3, 60}).has_value());       // the slot keeps all its 3, the entry 3 of 8
    EXPECT_FALSE(ram.load({1, 70}, {1, 2, 3, 60}).has_value());         // the slot keeps 1 of 2, more than the entry's 3 of 8
    EXPECT_TRUE(ram.load({70, 71}, {1, 2, 3, 60}).has_value());         // the slot keeps none: the entry is better
}

// --cache-ram -1: no size limit, and the oldest entries go while the cache
// holds more tokens than the context.
TEST(PromptCache, WithNoSizeLimitTheContextBoundsItsTokens) {
    PromptCacheModel<State> ram({-1, false, false, 8});
    ram.save({run_of(1, 5)});
    ram.save({run_of(20, 5)});
    ram.update();
    EXPECT_FALSE(ram.load({}, run_of(1, 6)).has_value());
    EXPECT_TRUE(ram.load({}, run_of(20, 6)).has_value());
    PromptCacheModel<State> big({8192, false, false, 8});
    big.save({run_of(1, 5)});
    big.save({run_of(20, 5)});
    big.update();
    EXPECT_TRUE(big.load({}, run_of(1, 6)).has_value());
}

TEST(PromptCache, TheSlotChoiceSavesWhereTheServerDoes) {
    const std::vector<int> empty, held = run_of(1, 10);
    // Pinned to an empty slot: the cache is looked up (the server's f_keep is 0/0 there, and it does not).
    EXPECT_TRUE(choose_slot({&empty}, request(0, {1, 2})).update_cache);
    EXPECT_FALSE(choose_slot({&held}, request(0, run_of(1, 6))).update_cache);  // keeps 5 of 10: one half
    EXPECT_TRUE(choose_slot({&held}, request(0, run_of(1, 4))).update_cache);   // keeps 3 of 10
    EXPECT_TRUE(choose_slot({&held}, request(0, {50, 51})).update_cache);     // not similar at all
    // Unpinned: the most similar slot, else the least recently used (always saved).
    const SlotChoice similar = choose_slot({&empty, &held}, request(-1, run_of(1, 8)));
    EXPECT_EQ(similar.by_similarity, 1);
    EXPECT_FALSE(similar.update_cache);
    const SlotChoice lru = choose_slot({&empty, &held}, request(-1, {50, 51}));
    EXPECT_EQ(lru.by_similarity, -1);
    EXPECT_TRUE(lru.update_cache);
}

TEST(PromptCache, TheContextIsPaddedAsTheLibraryPadsIt) {
    EXPECT_EQ(padded_n_ctx(100, 3, true), 256);
    EXPECT_EQ(padded_n_ctx(100, 3, false), 768);  // 256 / 3 slots, each padded to 256
    EXPECT_EQ(padded_n_ctx(600, 2, false), 1024);
}

// One slot: a chat, another client's prompt (its LRU take saves the
// chat), the chat again: the server loads it back and reuses all of it.
// Without a RAM cache the same count is a stale read; with one, a count
// of 0 is lost reuse.
TEST(PromptCache, TheReuseOracleFollowsAPromptThroughTheCache) {
    const Completion chat = request(0, run_of(1, 8)), other = request(-1, {50, 51, 52}), again = request(0, run_of(1, 10));
    for (const int cache_n : {8, 0}) {
        ServerSettings cached = plain_settings(1);
        cached.cache_ram = 8192, cached.idle_slots = true;
        SlotCacheModel ram(cached, kTestCtx), none(plain_settings(1), kTestCtx);
        for (SlotCacheModel* m : {&ram, &none}) {
            EXPECT_EQ(m->on_completion(chat, {answer(0, {9})}), "");
            EXPECT_EQ(m->on_completion(other, {answer(0, {60})}), "");
        }
        const std::string with = ram.on_completion(again, {answer(0, {11}, cache_n)});
        const std::string without = none.on_completion(again, {answer(0, {11}, cache_n)});
        if (cache_n == 8) {
            EXPECT_EQ(with, "");
            EXPECT_NE(without.find("a stale read"), std::string::npos);
        } else {
            EXPECT_NE(with.find("lost reuse"), std::string::npos);
            EXPECT_EQ(without, "");
        }
    }
}

// Unified KV with idle slots saved: launching a request clears every idle
// slot, so a chat on the other slot comes back through the cache.
TEST(PromptCache, IdleSlotsAreSavedAndClearedWithUnifiedKv) {
    ServerSettings cached = plain_settings(2);
    cached.cache_ram = 8192, cached.idle_slots = true, cached.unified = true;
    SlotCacheModel model(cached, kTestCtx);
    EXPECT_EQ(model.on_completion(request(0, run_of(1, 8)), {answer(0, {9})}), "");
    EXPECT_EQ(model.on_completion(request(1, {50, 51, 52}), {answer(1, {60})}), "");  // slot 0 saved, then cleared
    EXPECT_EQ(model.allowed(request(0, run_of(1, 10)), 0), (std::pair<int, int>{8, 8}));  // loaded back
    cached.unified = false;
    SlotCacheModel kept(cached, kTestCtx);  // not unified: slot 0 keeps its own
    EXPECT_EQ(kept.on_completion(request(0, run_of(1, 8)), {answer(0, {9})}), "");
    EXPECT_EQ(kept.on_completion(request(1, {50, 51, 52}), {answer(1, {60})}), "");
    EXPECT_EQ(kept.allowed(request(0, run_of(1, 10)), 0), (std::pair<int, int>{8, 8}));
    EXPECT_NE(model.on_completion(request(0, run_of(1, 10)), {answer(0, {11}, 0)}).find("lost reuse"), std::string::npos);
}

// ram-cache-ignores-lora, as the logprob oracle sees it: the chat's KV was
// computed with the adapter at 0.5; loaded back for a request at 1, it
// must be computed again. The stale answer (KV at 0.5 reused) is caught,
// the fresh one passes.
TEST(PromptCache, TheLogprobOracleKeepsALoadedPromptsLoraScales) {
    const Model model = Model::random(config_by_name("tiny"), 7);
    const auto loras = server_loras(model.config(), 7, 1);
    const Adapters half = adapters_at(model.config(), loras, {0.5f}), full = adapters_at(model.config(), loras, {1.0f});
    Completion chat = request(0, {5, 6, 7, 8}), other = request(-1, {30, 31, 32}), again = request(0, {5, 6, 7, 8, 9, 10});
    chat.lora = {0.5f}, other.lora = {1.0f}, again.lora = {1.0f};
    ServerSettings ram = plain_settings(1);
    ram.cache_ram = 8192, ram.loras = 1;  // idle slots not saved
    for (const bool stale : {false, true}) {
        LogprobOracle logprobs(ram, model, loras);
        EXPECT_EQ(logprobs.on_completion(chat, {answer(0, {})}), "");
        EXPECT_EQ(logprobs.on_completion(other, {answer(0, {})}), "");
        // The reference's answer, its first 4 positions' KV with the scale the chat was computed with, or afresh.
        ServerAnswer a = answer(0, {});
        ReferenceKv kv(model.config());
        std::vector<double> lp;
        for (int pos = 0; pos < 6; ++pos)
            lp = log_probs(reference_forward(model, kv, again.prompt[std::size_t(pos)], pos, stale && pos < 4 ? half : full));
        const int best = int(std::max_element(lp.begin(), lp.end()) - lp.begin());
        a.tokens = {best}, a.chosen = {lp[std::size_t(best)]}, a.top = {{{best, lp[std::size_t(best)]}}};
        const std::string why = logprobs.on_completion(again, {a});
        EXPECT_EQ(why.empty(), !stale) << why;
    }
}

}  // namespace
}  // namespace kvweld::sim::server::prompt_cache_test
