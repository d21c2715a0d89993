#include "engine/config.hpp"
#include "util/error.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

namespace kvweld {
namespace {

using testing::expect_error;

TEST(Config, NamedConfigsValidate) {
    for (const char* name : {"tiny", "tiny-qwen3", "stories15m", "110m"})
        EXPECT_NO_THROW(config_by_name(name).validate()) << name;
    EXPECT_EQ(stories15m_config().dim, 288);
    EXPECT_EQ(stories15m_config().ffn_dim, 768);
}

TEST(Config, ValidateNamesTheField) {
    auto broken = [](auto mutate) {
        ModelConfig c = tiny_config();
        mutate(c);
        return c;
    };
    expect_error([&] { broken([](ModelConfig& c) { c.vocab = 0; }).validate(); }, {"vocab", "0"});
    expect_error([&] { broken([](ModelConfig& c) { c.n_layers = -3; }).validate(); },
                 {"n_layers", "-3"});
    expect_error([&] { broken([](ModelConfig& c) { c.n_kv_heads = 3; }).validate(); },
                 {"n_heads", "4", "n_kv_heads", "3"});
    expect_error([&] { broken([](ModelConfig& c) { c.head_dim = 7; c.dim = 28; }).validate(); },
                 {"head_dim", "7"});
    expect_error([&] { broken([](ModelConfig& c) { c.dim = 30; }).validate(); },
                 {"dim", "30", "32"});
    expect_error([&] { broken([](ModelConfig& c) { c.norm_eps = 0; }).validate(); }, {"norm_eps"});
    expect_error([] { config_by_name("huge"); }, {"huge", "tiny"});
    expect_error([] { family_from_string("gpt"); }, {"gpt", "llama"});
}

TEST(Config, Qwen3MayHaveQDimOtherThanDim) {
    ModelConfig c = tiny_config(Family::qwen3);
    c.dim = 24;
    EXPECT_NO_THROW(c.validate());
    c.family = Family::llama;
    EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace kvweld
