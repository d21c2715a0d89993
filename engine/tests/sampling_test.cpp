// Backend samplers (engine/sampling.hpp): greedy takes the largest logit;
// top-k draws only among the k largest, as often as their softmax says;
// the same seed draws the same tokens; may_sample, the oracle's check,
// accepts exactly what a spec can give, within the tolerance.
#include "engine/sampling.hpp"

#include "util/error.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvweld {
namespace {

const std::vector<float> kLogits = {0.5f, 3.0f, -1.0f, 2.5f, 2.9f, 0.0f};  // largest: 1, 4, 3

TEST(Sampling, GreedyTakesTheLargestAndTheLowerTokenAmongEquals) {
    Sampler greedy({0, 9});
    EXPECT_EQ(greedy.sample(kLogits), 1);
    EXPECT_EQ(greedy.sample(std::vector<float>{1.0f, 2.0f, 2.0f}), 1);
}

TEST(Sampling, TopKDrawsOnlyAmongTheKLargestAsTheirSoftmaxSays) {
    Sampler top3({3, 42});
    std::vector<int> count(kLogits.size(), 0);
    for (int i = 0; i < 4000; ++i) ++count[std::size_t(top3.sample(kLogits))];
    EXPECT_EQ(count[0] + count[2] + count[5], 0);
    // Softmax over 3.0, 2.9, 2.5: weights 1, 0.905, 0.607 of 2.512.
    EXPECT_NEAR(count[1] / 4000.0, 0.398, 0.03);
    EXPECT_NEAR(count[4] / 4000.0, 0.360, 0.03);
    EXPECT_NEAR(count[3] / 4000.0, 0.242, 0.03);
}

TEST(Sampling, TheSameSeedDrawsTheSameTokensAndAnotherSeedOthers) {
    Sampler a({4, 7}), b({4, 7}), c({4, 8});
    std::vector<int> ta, tb, tc;
    for (int i = 0; i < 64; ++i) {
        ta.push_back(a.sample(kLogits));
        tb.push_back(b.sample(kLogits));
        tc.push_back(c.sample(kLogits));
    }
    EXPECT_EQ(ta, tb);
    EXPECT_NE(ta, tc);
}

TEST(Sampling, MaySampleAcceptsWhatTheSpecCanGiveWithinTheTolerance) {
    EXPECT_TRUE(may_sample({0, 0}, kLogits, 1, 1e-4));
    EXPECT_FALSE(may_sample({0, 0}, kLogits, 4, 1e-4));  // 0.1 below the largest
    EXPECT_TRUE(may_sample({0, 0}, kLogits, 4, 0.02));   // within 2 x 0.02 x 3.0
    EXPECT_TRUE(may_sample({3, 0}, kLogits, 3, 1e-4));
    EXPECT_FALSE(may_sample({3, 0}, kLogits, 0, 1e-4));
    EXPECT_FALSE(may_sample({3, 0}, kLogits, -1, 1e-4));
    EXPECT_FALSE(may_sample({3, 0}, kLogits, 6, 1e-4));
}

TEST(Sampling, ATopKPastTheVocabularyOrSixtyFourIsAnErrorNamingIt) {
    EXPECT_NO_THROW(require_sampler({6, 0}, 6));
    EXPECT_THROW(require_sampler({7, 0}, 6), Error);
    EXPECT_THROW(require_sampler({-1, 0}, 6), Error);
    try {
        require_sampler({65, 0}, 1000);
        FAIL() << "top_k 65 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("top_k 65 out of range 0..64"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace kvweld
