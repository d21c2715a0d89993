// Where the sampler chain kvweld asks for cuts a distribution, and when a
// cut lies within a rounding: both halves, on a measured distribution and
// on ones built to sit on and off each threshold.
#include "sim/server/sampler_cut.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace kvweld::sim::server {
namespace {

using Logprobs = std::vector<std::pair<int, double>>;

// `probs` as (token, logprob), token i for the i-th.
Logprobs of(const std::vector<double>& probs) {
    Logprobs out;
    for (std::size_t i = 0; i < probs.size(); ++i) out.emplace_back(int(i), std::log(probs[i]));
    return out;
}

// llama-server b11434, seed 327 (kvweld sim --engine llama-server --seed 327
// --steps 80), op 26: the ground truth's whole distribution at generated
// token 3. Of its top 40, the first 30 hold 0.9499997 of the mass: a cached
// slot's rounding kept 30 tokens and drew 22, the fresh server's kept 31
// and drew 53, with every logprob within 1e-6 of each other.
const Logprobs kSeed327Token3 = {
    {54, -2.33741808}, {20, -2.46718979}, {94, -2.57160234}, {15, -2.57766199}, {89, -2.7839489}, {56, -2.81761456},
    {86, -2.94555187}, {4, -3.00191212}, {11, -3.43403077}, {23, -3.60010529}, {84, -3.64874959}, {37, -3.64891648},
    {87, -3.75896239}, {83, -3.81499076}, {33, -3.97009754}, {49, -3.98202467}, {52, -4.17883158}, {9, -4.29038525},
    {45, -4.34134674}, {41, -4.549891}, {29, -4.5807724}, {65, -4.59597206}, {31, -4.79025412}, {8, -4.79213285},
    {57, -4.85894442}, {22, -4.87026501}, {53, -4.91515064}, {73, -4.93240023}, {19, -4.98497581}, {43, -5.02939987},
    {93, -5.0611577}, {81, -5.15375614}, {66, -5.23988676}, {10, -5.25733328}, {6, -5.39983845}, {69, -5.4954915},
    {7, -5.52743721}, {58, -5.54154539}, {32, -5.55770683}, {50, -5.63392925}, {70, -5.64117193}, {14, -5.68337965},
    {88, -5.72323132}, {82, -5.76095915}, {47, -5.76639843}, {27, -5.82585335}, {1, -5.90881729}, {92, -6.07652712},
    {67, -6.08257294}, {36, -6.08980703}, {74, -6.09915209}, {78, -6.13078308}, {62, -6.15981722}, {91, -6.25187778},
    {30, -6.25948858}, {5, -6.28349113}, {60, -6.32908344}, {18, -6.51648664}, {17, -6.53451777}, {63, -6.55892229},
    {72, -6.56377697}, {55, -6.5775795}, {24, -6.60604286}, {13, -6.62533617}, {48, -6.66536379}, {21, -6.71463442},
    {34, -6.7917285}, {3, -6.82732725}, {95, -6.84764338}, {79, -6.96218157}, {2, -7.09803057}, {75, -7.11464119},
    {71, -7.26916647}, {42, -7.28099728}, {40, -7.4555459}, {80, -7.45857859}, {68, -7.46019888}, {39, -7.57455158},
    {59, -7.64065313}, {16, -7.74610329}, {64, -7.84853649}, {51, -7.9302783}, {28, -7.95028496}, {12, -8.10645485},
    {61, -8.73469734}, {35, -8.76373291}, {25, -8.79391861}, {85, -8.80222893}, {44, -8.93109989}, {0, -9.10938263},
    {38, -9.25038338}, {90, -9.29238701}, {77, -9.30939102}, {46, -9.55443192}, {76, -9.8139925}, {26, -9.96637917}
};

TEST(SamplerCut, TheMeasuredTopPSumOnItsThresholdIsUncertain) {
    const std::string why = uncertain_cut(kSeed327Token3, 1e-4);
    EXPECT_NE(why.find("top-p: the first 30 tokens of the top 40"), std::string::npos) << why;
    // Its cut is 3e-7 from 0.95: a tolerance under that leaves it determined.
    EXPECT_EQ(uncertain_cut(kSeed327Token3, 1e-8), "");
}

TEST(SamplerCut, ASumClearOfTopPIsDetermined) {
    EXPECT_NE(uncertain_cut(of({0.5, 0.3, 0.15, 0.05}), 1e-4).find("top-p: the first 3"), std::string::npos);
    EXPECT_EQ(uncertain_cut(of({0.5, 0.3, 0.14, 0.06}), 1e-4), "");
}

TEST(SamplerCut, ATokenOnTheMinPFloorIsUncertain) {
    // 0.9 and 0.045: the second is 0.05 of the best, inside the top-p cut (0.9 < 0.95).
    EXPECT_NE(uncertain_cut(of({0.9, 0.045, 0.03, 0.025}), 1e-4).find("min-p: token 1"), std::string::npos);
    EXPECT_EQ(uncertain_cut(of({0.9, 0.04, 0.035, 0.025}), 1e-4), "");
}

TEST(SamplerCut, ATieAtTheTopKCutIsUncertain) {
    std::vector<double> probs(42, 0.3 / 41);
    probs[0] = 0.7;  // top-p's sums and min-p's ratios all clear: only the top-k cut is near a tie
    EXPECT_NE(uncertain_cut(of(probs), 1e-4).find("top-k"), std::string::npos);
    probs[40] /= 2, probs[41] /= 2;  // tokens 40 and 41 clear of 39
    EXPECT_EQ(uncertain_cut(of(probs), 1e-4), "");
}

}  // namespace
}  // namespace kvweld::sim::server
