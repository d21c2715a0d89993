// The reference's 16-bit KV rows (engine/reference.hpp round_to): each
// value rounded to nearest, ties to even, as ggml's F16C and bf16
// conversions round; and a 16-bit KV gives answers apart from F32's.
#include "engine/reference.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kvweld {
namespace {

TEST(KvRounding, F16RoundsToNearestEven) {
    EXPECT_EQ(round_to(KvType::f16, 1.0f + 0x1p-11f), 1.0f);                // a tie: to the even 1.0
    EXPECT_EQ(round_to(KvType::f16, 1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);  // a tie: to the even 1 + 2^-9
    EXPECT_EQ(round_to(KvType::f16, 1.0f + 0x1p-12f), 1.0f);
    EXPECT_EQ(round_to(KvType::f16, -3.14159265f), -3.140625f);
    EXPECT_EQ(round_to(KvType::f16, 0x1p-20f + 0x1p-26f), 0x1p-20f);     // a subnormal: a multiple of 2^-24
    EXPECT_EQ(round_to(KvType::f16, 70000.0f), std::numeric_limits<float>::infinity());
    EXPECT_EQ(round_to(KvType::f16, 65504.0f), 65504.0f);
    EXPECT_EQ(round_to(KvType::f32, 1.0f + 0x1p-20f), 1.0f + 0x1p-20f);
}

TEST(KvRounding, Bf16KeepsSevenMantissaBits) {
    EXPECT_EQ(round_to(KvType::bf16, 1.0f + 0x1p-8f), 1.0f);               // a tie: to the even 1.0
    EXPECT_EQ(round_to(KvType::bf16, 1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
    EXPECT_EQ(round_to(KvType::bf16, 3.14159265f), 3.140625f);
    EXPECT_TRUE(std::isnan(round_to(KvType::bf16, std::numeric_limits<float>::quiet_NaN())));
}

// The same tokens over F32 and 16-bit rows: logits apart by more than
// the data tolerance (the rounding is not a no-op), and by far less than a
// stale row moves them.
TEST(KvRounding, SixteenBitRowsMoveTheLogitsALittle) {
    const Model model = Model::random(config_by_name("tiny"), 5);
    for (const KvType type : {KvType::f16, KvType::bf16}) {
        ReferenceKv exact(model.config()), rounded(model.config(), type);
        double worst = 0;
        for (int pos = 0; pos < 24; ++pos) {
            const int token = (pos * 7 + 3) % model.config().vocab;
            worst = std::max(worst, logit_error(reference_forward(model, rounded, token, pos),
                                                reference_forward(model, exact, token, pos)));
        }
        EXPECT_GT(worst, kDataTolerance);
        EXPECT_LT(worst, 0.05);
    }
}

}  // namespace
}  // namespace kvweld
