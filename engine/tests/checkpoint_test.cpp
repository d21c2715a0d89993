#include "engine/checkpoint.hpp"
#include "engine/gguf.hpp"
#include "util/error.hpp"
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
// reference is targets/llamacpp/tests.)
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

// Reading back what the writer wrote: the same weights, bit for bit, for a
// dense model, an MoE model and an adapter.
TEST(GgufRead, RoundTripKeepsEveryWeight) {
    for (const char* name : {"tiny", "tiny-moe", "small"}) {
        const Model model = Model::random(config_by_name(name), 7);
        const Model back = parse_gguf(serialize_gguf(model), "<memory>");
        EXPECT_EQ(back.config(), model.config()) << name;
        ASSERT_EQ(back.all_weights().size(), model.all_weights().size()) << name;
        EXPECT_TRUE(std::equal(back.all_weights().begin(), back.all_weights().end(), model.all_weights().begin()))
            << name;
        EXPECT_NE(back.id(), model.id());
    }
    const Model model = Model::random(tiny_config(), 8);
    const auto lora = LoraAdapter::random(model.config(), 4, 8.0f, 3);
    const auto back = parse_gguf_lora(serialize_gguf_lora(*lora), model.config(), "<memory>");
    EXPECT_EQ(back->rank(), 4);
    EXPECT_EQ(back->alpha(), 8.0f);
    for (int l = 0; l < model.config().n_layers; ++l)
        for (int t = 0; t < kLoraTargets; ++t) {
            EXPECT_EQ(back->matrix(l, LoraTarget(t)).a, lora->matrix(l, LoraTarget(t)).a);
            EXPECT_EQ(back->matrix(l, LoraTarget(t)).b, lora->matrix(l, LoraTarget(t)).b);
        }
}

// A corrupt file is an Error naming the file and the value, never a crash
// or an allocation its bytes do not back.
TEST(GgufRead, CorruptFilesAreRefusedNamingTheProblem) {
    const std::vector<std::byte> good = serialize_gguf(Model::random(tiny_config(), 9));
    auto with = [&](std::size_t at, std::uint64_t value, std::size_t bytes) {
        std::vector<std::byte> b = good;
        std::memcpy(b.data() + at, &value, bytes);
        return b;
    };
    auto find = [&](std::string_view text) {
        const std::string_view all(reinterpret_cast<const char*>(good.data()), good.size());
        return all.find(text);
    };
    expect_error([&] { parse_gguf(std::span(good).first(3), "m.gguf"); }, {"m.gguf", "truncated"});
    expect_error([&] { parse_gguf(with(0, 0x12345678, 4), "m.gguf"); }, {"not a GGUF file"});
    expect_error([&] { parse_gguf(with(4, 9, 4), "m.gguf"); }, {"version 9", "2 and 3"});
    expect_error([&] { parse_gguf(with(8, std::uint64_t(1) << 40, 8), "m.gguf"); }, {"tensors", "limit"});
    expect_error([&] { parse_gguf(std::span(good).first(good.size() / 2), "m.gguf"); }, {"m.gguf"});
    // The embedding width past what the data holds: refused before allocating.
    const std::size_t dim_value = find("llama.embedding_length") + std::string_view("llama.embedding_length").size() + 4;
    expect_error([&] { parse_gguf(with(dim_value, 4096, 4), "m.gguf"); }, {"m.gguf"});
    // A tensor of another type, and of another shape.
    const std::size_t embd = find("token_embd.weight") + std::string_view("token_embd.weight").size();
    expect_error([&] { parse_gguf(with(embd + 4 + 16, 1, 4), "m.gguf"); }, {"token_embd.weight", "ggml type 1", "F32"});
    expect_error([&] { parse_gguf(with(embd + 4, 31, 8), "m.gguf"); }, {"token_embd.weight", "[31, 64]", "[32, 64]"});
    std::vector<std::byte> nan = good;
    const float bad = std::nanf("");
    std::memcpy(nan.data() + nan.size() - 4, &bad, 4);
    expect_error([&] { parse_gguf(nan, "m.gguf"); }, {"output.weight", "not finite"});
    expect_error([] { load_gguf("/nonexistent/m.gguf"); }, {"/nonexistent/m.gguf", "cannot open"});
}

TEST(GgufRead, AnAdapterOfAnotherShapeIsRefusedNamingTheTensor) {
    ModelConfig wide = tiny_config();
    wide.ffn_dim += 16;
    const std::vector<std::byte> file = serialize_gguf_lora(*LoraAdapter::random(wide, 2, 2.0f, 1));
    expect_error([&] { parse_gguf_lora(file, tiny_config(), "a.gguf"); }, {"a.gguf", "ffn_down", "[80, 2]", "[64, 2]"});
    expect_error([&] { parse_gguf_lora(serialize_gguf(Model::random(tiny_config(), 1)), tiny_config(), "m.gguf"); },
                 {"m.gguf", "general.type"});
}

}  // namespace
}  // namespace kvweld
