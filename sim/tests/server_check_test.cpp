// The two oracles of kvweld server-check, each shown its own power on an
// answer only it sees is wrong (a stand-in server's answer, made here from
// the reference), and each passing the right answer: both halves.
#include "sim/server_check.hpp"

#include "engine/reference.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace kvweld::sim {
namespace {

// The right greedy answer to `prompt`: n tokens and each one's top 4, from the reference.
ServerAnswer reference_answer(const Model& model, std::vector<int> prompt, int n) {
    ServerAnswer a;
    ReferenceKv kv(model.config());
    for (int pos = 0; int(a.tokens.size()) < n; ++pos) {
        const std::vector<float> logits = reference_forward(model, kv, prompt[std::size_t(pos)], pos);
        if (pos + 1 < int(prompt.size())) continue;
        const std::vector<double> lp = log_probs(logits);
        std::vector<int> order(logits.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = int(i);
        std::sort(order.begin(), order.end(), [&](int x, int y) { return logits[std::size_t(x)] > logits[std::size_t(y)]; });
        a.top.emplace_back();
        for (int k = 0; k < 4; ++k) a.top.back().emplace_back(order[std::size_t(k)], lp[std::size_t(order[std::size_t(k)])]);
        a.tokens.push_back(order[0]);
        prompt.push_back(order[0]);
    }
    return a;
}

TEST(ServerCheck, LogprobOracleSeesOneWrongLogprobAndOneWrongToken) {
    const Model model = Model::random(config_by_name("tiny"), 3);
    const std::vector<int> prompt = {5, 6, 7, 8};
    const ServerAnswer right = reference_answer(model, prompt, 4);
    LogprobOracle oracle(model, 1e-4, 3, 0);
    EXPECT_EQ(oracle.judge(0, prompt, right), "");
    EXPECT_EQ(oracle.tokens_judged(), 4);
    ServerAnswer off = right;
    off.top[2][1].second += 1e-3;  // one logprob of the third token
    EXPECT_NE(oracle.judge(1, prompt, off).find("generated token 2: token"), std::string::npos);
    ServerAnswer wrong = right;
    wrong.tokens[1] = wrong.top[1][3].first;  // not the most likely
    EXPECT_NE(oracle.judge(2, prompt, wrong).find("generated token 1 is"), std::string::npos);
}

TEST(ServerCheck, SlotCacheModelSeesAStaleReadAndLostReuse) {
    ServerAnswer a;
    a.tokens = {40, 41, 42};
    SlotCacheModel model(2, 0);
    EXPECT_EQ(model.judge(0, {1, 2, 3, 4}, a), "");  // a fresh slot: cache_n 0
    // Slot 0 holds 1 2 3 4 40 41 (42 was never decoded): a chat turn may reuse all 6.
    a.cache_n = 6;
    EXPECT_EQ(model.judge(0, {1, 2, 3, 4, 40, 41, 42, 9}, a), "");
    a.cache_n = 0;  // slot 1 holds nothing
    EXPECT_EQ(model.judge(1, {1, 2, 3, 4, 5}, a), "");
    a.cache_n = 3;  // a shared prefix of 3
    EXPECT_EQ(model.judge(0, {1, 2, 3, 9, 9}, a), "");
    a.cache_n = 5;  // more than the 3 it shares
    EXPECT_NE(model.judge(0, {1, 2, 3, 7, 7, 7}, a).find("a stale read"), std::string::npos);
    a.cache_n = 1;  // less than the 3 it shares
    EXPECT_NE(model.judge(0, {1, 2, 3, 8}, a).find("lost reuse"), std::string::npos);
    a.cache_n = 2;  // all 3 of a prompt the slot holds: the last token is evaluated again
    EXPECT_EQ(model.judge(0, {1, 2, 3}, a), "");
    EXPECT_EQ(model.stale(), 1);
    EXPECT_EQ(model.lost(), 1);
}

// With --cache-reuse 2, an agent's edit (a token cut from the middle) keeps
// the chunk after the cut: the prefix of 2, then the 3 tokens shifted back.
TEST(ServerCheck, SlotCacheModelCountsTheChunksTheServerShifts) {
    ServerAnswer a;
    a.tokens = {9};
    SlotCacheModel reuse(1, 2), plain(1, 0);
    EXPECT_EQ(reuse.judge(0, {1, 2, 3, 4, 5, 6}, a), "");
    EXPECT_EQ(plain.judge(0, {1, 2, 3, 4, 5, 6}, a), "");
    a.cache_n = 5;  // 1 2 | (3 cut) | 4 5 6 shifted, then the new 7
    EXPECT_EQ(reuse.judge(0, {1, 2, 4, 5, 6, 7}, a), "");
    EXPECT_NE(plain.judge(0, {1, 2, 4, 5, 6, 7}, a).find("a stale read"), std::string::npos);
}

// A slot's tokens move with its state: saved from slot 0, restored into
// slot 1, which then reuses them; a count that differs is named.
TEST(ServerCheck, SlotCacheModelFollowsSaveRestoreAndErase) {
    ServerAnswer a;
    a.tokens = {40, 41};
    SlotCacheModel model(2, 0);
    EXPECT_EQ(model.judge(0, {1, 2, 3}, a), "");  // slot 0 holds 1 2 3 40
    EXPECT_EQ(model.on_slot_action(SlotAction::save, 0, 2, 4), "");
    EXPECT_EQ(model.on_slot_action(SlotAction::restore, 1, 2, 4), "");
    a.cache_n = 4;
    EXPECT_EQ(model.judge(1, {1, 2, 3, 40, 41, 5}, a), "");
    EXPECT_NE(model.on_slot_action(SlotAction::erase, 0, 0, 3).find("the server's count is 3 tokens, but slot 0 held 4"),
              std::string::npos);
    a.cache_n = 1;  // slot 0 was erased: nothing to reuse
    EXPECT_NE(model.judge(0, {1, 2, 3}, a).find("a stale read"), std::string::npos);
    EXPECT_NE(model.on_slot_action(SlotAction::restore, 0, 1, 2).find("file 1 holds 0"), std::string::npos);
}

TEST(ServerCheck, AnAnswerWithoutItsFieldsIsAnError) {
    EXPECT_THROW(parse_server_answer("{\"content\": \"x\"}"), Error);
    EXPECT_THROW(parse_server_answer("not json"), Error);
    const ServerAnswer a = parse_server_answer(
        R"({"tokens": [3], "timings": {"cache_n": 2}, "completion_probabilities": [{"id": 3, "top_logprobs": [{"id": 3, "logprob": -0.5}]}]})");
    EXPECT_EQ(a.tokens, std::vector<int>{3});
    EXPECT_EQ(a.cache_n, 2);
    EXPECT_EQ(a.top[0][0], (std::pair<int, double>{3, -0.5}));
}

}  // namespace
}  // namespace kvweld::sim
