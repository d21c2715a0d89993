#include "engine/checkpoint.hpp"
#include "engine/gguf.hpp"
#include "engine/error.hpp"
#include "test_util.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>

namespace kvweld {
namespace {

using testing::expect_error;

// A llama model whose classifier is the embedding (positive vocab_size).
Model shared_classifier_model(const ModelConfig& cfg, std::uint64_t seed) {
    Model m = Model::zeros(cfg, /*shared_classifier=*/true);
    Rng rng(seed);
    for (float& w : m.all_weights_mut()) w = rng.symmetric(0.3f);
    return m;
}

std::string temp_path(const char* name) {
    return (std::filesystem::temp_directory_path() / name).string();
}

void set_header_field(std::vector<std::byte>& bytes, int field, std::int32_t value) {
    std::memcpy(bytes.data() + field * sizeof(std::int32_t), &value, sizeof value);
}

TEST(Checkpoint, RoundTripKeepsWeightsAndMintsNewId) {
    for (bool shared : {false, true}) {
        const Model original = shared ? shared_classifier_model(tiny_config(), 3)
                                      : Model::random(tiny_config(), 3);
        const std::string path = temp_path(shared ? "kvweld_rt_shared.bin" : "kvweld_rt.bin");
        save_llama2c(original, path);
        const Model loaded = load_llama2c(path);
        EXPECT_EQ(loaded.config(), original.config());
        EXPECT_EQ(loaded.shared_classifier(), shared);
        ASSERT_EQ(loaded.all_weights().size(), original.all_weights().size());
        EXPECT_TRUE(std::equal(loaded.all_weights().begin(), loaded.all_weights().end(),
                               original.all_weights().begin()));
        EXPECT_NE(loaded.id(), original.id());
        std::filesystem::remove(path);
    }
}

TEST(Checkpoint, FileSizeMustMatchHeader) {
    const std::vector<std::byte> good = serialize_llama2c(Model::random(tiny_config(), 1));
    std::vector<std::byte> truncated(good.begin(), good.end() - 4);
    expect_error([&] { parse_llama2c(truncated); },
                 {std::to_string(truncated.size()), std::to_string(good.size()), "truncated"});
    std::vector<std::byte> oversized = good;
    oversized.resize(good.size() + 4);
    expect_error([&] { parse_llama2c(oversized); }, {"oversized", std::to_string(good.size())});
    std::vector<std::byte> tiny(good.begin(), good.begin() + 10);
    expect_error([&] { parse_llama2c(tiny); }, {"10 bytes", "header"});
}

TEST(Checkpoint, ImpossibleHeaderIsRejected) {
    const std::vector<std::byte> good = serialize_llama2c(Model::random(tiny_config(), 1));
    auto with = [&](int field, std::int32_t value) {
        std::vector<std::byte> b = good;
        set_header_field(b, field, value);
        return b;
    };
    expect_error([&] { parse_llama2c(with(3, 0)); }, {"n_heads", "0"});
    expect_error([&] { parse_llama2c(with(3, 5)); }, {"dim 32", "n_heads 5"});
    expect_error([&] { parse_llama2c(with(4, 3)); }, {"n_kv_heads", "3"});
    expect_error([&] { parse_llama2c(with(5, std::numeric_limits<std::int32_t>::min())); },
                 {"vocab_size"});
    expect_error([&] { parse_llama2c(with(2, -1)); }, {"n_layers", "-1"});
    // A huge but valid-looking header must fail on size, not allocate.
    expect_error([&] { parse_llama2c(with(5, 4'000'000)); }, {"truncated"});
}

TEST(Checkpoint, NonFiniteWeightIsCorrupt) {
    std::vector<std::byte> b = serialize_llama2c(Model::random(tiny_config(), 1));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(b.data() + 28 + 4 * 5, &nan, sizeof nan);
    expect_error([&] { parse_llama2c(b); }, {"weight 5", "not finite"});
}

TEST(Checkpoint, MissingFileAndQwen3AreErrors) {
    expect_error([] { load_llama2c("/nonexistent/kvweld.bin"); }, {"/nonexistent/kvweld.bin", "open"});
    expect_error([] { serialize_llama2c(Model::random(tiny_config(Family::qwen3), 1)); }, {"qwen3"});
}

// The GGUF export's framing: magic, version, counts, and every tensor's
// data present and aligned. (llama.cpp loading it and agreeing with the
// reference is engines/llamacpp/tests.)
TEST(Gguf, HeaderAndSize) {
    const Model model = Model::random(tiny_config(), 4);
    const std::vector<std::byte> bytes = serialize_gguf(model);
    auto u32 = [&](std::size_t at) { std::uint32_t v; std::memcpy(&v, bytes.data() + at, 4); return v; };
    auto u64 = [&](std::size_t at) { std::uint64_t v; std::memcpy(&v, bytes.data() + at, 8); return v; };
    EXPECT_EQ(std::memcmp(bytes.data(), "GGUF", 4), 0);
    EXPECT_EQ(u32(4), 3u);
    const auto layers = std::uint64_t(model.config().n_layers);
    EXPECT_EQ(u64(8), 3 + 9 * layers);  // embedding, output norm, classifier, 9 per layer
    EXPECT_EQ(u64(16), 12u);
    // Every weight is there once, f32, after a 32-byte-aligned header.
    EXPECT_GE(bytes.size(), model.all_weights().size_bytes());
    EXPECT_EQ(bytes.size() % 32, 0u);
}

TEST(Gguf, Qwen3IsRefusedWithTheReason) {
    expect_error([] { serialize_gguf(Model::random(tiny_config(Family::qwen3), 1)); }, {"qwen3", "llama only"});
    expect_error([] { save_gguf(Model::random(tiny_config(), 1), "/nonexistent/dir/x.gguf"); },
                 {"GGUF", "/nonexistent/dir/x.gguf", "cannot open"});
}

}  // namespace
}  // namespace kvweld
