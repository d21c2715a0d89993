// The one slot model (sim/server/slot_states.hpp): the server's rules it
// holds, each shown both ways.
#include "sim/server/slot_states.hpp"

#include "sim/tests/server_test_util.hpp"
#include "util/error.hpp"

#include <gtest/gtest.h>

namespace kvweld::sim::server {
namespace {

using test::answer;
using test::kTestCtx;
using test::plain_settings;
using test::request;

struct State {
    std::vector<int> tokens;
    void clear() { tokens.clear(); }
};

// What a request leaves in its slot: the prompt and the answer but its last token.
auto serve_into(const Completion& c) {
    return [&c](State& s, const State&, const ServerAnswer& a) {
        s.tokens = c.prompt;
        s.tokens.insert(s.tokens.end(), a.tokens.begin(), a.tokens.end() - 1);
        return std::string();
    };
}

TEST(SlotStates, ACopysSlotIsReleasedEmptyAndTheParentsKeepsItsPrompt) {
    SlotStates<State> states(plain_settings(2), kTestCtx, State{});
    Completion c = request(-1, {1, 2, 3}, 2);
    c.n_cmpl = 2;
    ServerAnswer parent = answer(0, {7, 8}), copy = answer(1, {9, 5});
    copy.index = 1;
    std::vector<int> copy_started;
    states.complete(c, {copy, parent}, [&](State& s, const State& before, const ServerAnswer& a) {
        if (a.index == 1) copy_started = s.tokens;
        EXPECT_TRUE(before.tokens.empty());  // the parent's slot before the prompt
        return serve_into(c)(s, before, a);
    });
    EXPECT_EQ(states.slot(0).tokens, (std::vector<int>{1, 2, 3, 7}));
    EXPECT_TRUE(states.slot(1).tokens.empty());
    EXPECT_TRUE(copy_started.empty());  // a copy starts from the parent's cells as they were, not its own slot's
}

TEST(SlotStates, TheFirstComplaintIsKeptAndNamesItsCompletion) {
    SlotStates<State> states(plain_settings(2), kTestCtx, State{});
    Completion c = request(-1, {1, 2}, 1);
    c.n_cmpl = 2;
    ServerAnswer parent = answer(0, {7}), copy = answer(1, {9});
    copy.index = 1;
    const std::string wrong = states.complete(c, {parent, copy}, [](State&, const State&, const ServerAnswer& a) {
        return a.index == 1 ? std::string("wrong") : std::string();
    });
    EXPECT_EQ(wrong, "completion 1: wrong");
    EXPECT_EQ(states.complete(request(0, {3}), {answer(0, {4})}, serve_into(request(0, {3}))), "");
}

TEST(SlotStates, SlotActionsMoveAStateWholeAndAnUnsavedFileRestoresNothing) {
    SlotStates<State> states(plain_settings(2), kTestCtx, State{});
    const Completion c = request(0, {4, 5, 6}, 2);
    states.complete(c, {answer(0, {1, 2})}, serve_into(c));
    states.act({SlotAction::save, 0, 1});
    ASSERT_NE(states.file(1), nullptr);
    EXPECT_EQ(states.file(0), nullptr);
    states.act({SlotAction::restore, 1, 1});
    EXPECT_EQ(states.slot(1).tokens, (std::vector<int>{4, 5, 6, 1}));
    states.act({SlotAction::erase, 0, 0});
    EXPECT_TRUE(states.slot(0).tokens.empty());
    states.act({SlotAction::restore, 1, 2});
    EXPECT_TRUE(states.slot(1).tokens.empty());
    EXPECT_THROW(states.act({SlotAction::save, 2, 0}), Error);  // the server has 2 slots
    EXPECT_THROW(states.complete(c, {answer(5, {1})}, serve_into(c)), Error);
}

TEST(SlotStates, ARequestNamingNoAdaptersRunsWithTheServersAndTheSlotKeepsThem) {
    ServerSettings s = plain_settings(1);
    s.loras = 2;
    SlotStates<State> states(s, kTestCtx, State{});
    EXPECT_EQ(states.server_scales(), (std::vector<float>{1, 1}));
    Lora l;
    l.scales = {0.5f, 0.0f};
    states.lora(l);
    Completion own = request(0, {1, 2}), none = request(0, {1, 2});
    own.lora = {0.0f, 1.0f};
    EXPECT_EQ(states.scales(own), own.lora);
    EXPECT_EQ(states.scales(none), (std::vector<float>{0.5f, 0.0f}));
    states.complete(own, {answer(0, {3})}, serve_into(own));
    EXPECT_EQ(states.adapters(0), own.lora);  // slot.lora: its last request's
    states.act({SlotAction::restore, 0, 0});
    EXPECT_EQ(states.adapters(0), own.lora);  // a restore leaves them (the server's slot.lora is the slot's)
}

}  // namespace
}  // namespace kvweld::sim::server
