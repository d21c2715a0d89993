// strip_features (targets/strip_features.hpp): a header's blocks kept or
// dropped by the features a program uses, the directives gone, and each
// malformed guard refused with its line.
#include "targets/strip_features.hpp"

#include "util/error.hpp"

#include <gtest/gtest.h>

namespace kvweld::targets {
namespace {

constexpr const char* kHeader = R"(// The opening comment: dropped.
#pragma once

#ifndef KVWELD_USES
#define KVWELD_USES(feature) 1
#endif

#include "targets/llamacpp/llama_compat.hpp"
#include <vector>

int always();  // a trailing comment stays
#if KVWELD_USES(LORA)
// a reason: dropped
int lora();
#if KVWELD_USES(CVEC)
int lora_and_cvec();
#endif
#endif

// ---- A section ----
#if KVWELD_USES(SAMPLER) || KVWELD_USES(CVEC)
#include <map>
int sampler_or_cvec();
#endif
#ifdef NDEBUG
int kept_whole();
#endif
)";

TEST(StripFeatures, KeepsOnlyTheBlocksOfFeaturesUsed) {
    const Stripped none = strip_features(kHeader, {});
    EXPECT_EQ(none.text, "int always();  // a trailing comment stays\n\n// ---- A section ----\n#ifdef NDEBUG\n"
                         "int kept_whole();\n#endif\n");
    EXPECT_EQ(none.includes, (std::set<std::string>{"#include <vector>"}));

    const Stripped lora = strip_features(kHeader, {"LORA"});
    EXPECT_NE(lora.text.find("int lora();\n"), std::string::npos);
    EXPECT_EQ(lora.text.find("lora_and_cvec"), std::string::npos);  // nested: both must be used
    EXPECT_EQ(lora.text.find("sampler_or_cvec"), std::string::npos);

    const Stripped both = strip_features(kHeader, {"LORA", "CVEC"});
    EXPECT_NE(both.text.find("int lora_and_cvec();\n"), std::string::npos);
    EXPECT_NE(both.text.find("int sampler_or_cvec();\n"), std::string::npos);  // either of an ||
    EXPECT_EQ(both.includes, (std::set<std::string>{"#include <map>", "#include <vector>"}));
    EXPECT_EQ(both.text.find("#if KVWELD"), std::string::npos);
    EXPECT_EQ(both.text.find("#endif\n#endif"), std::string::npos);
}

void expect_refused(const char* text, const char* message) {
    try {
        strip_features(text, {"LORA"});
        ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
}

TEST(StripFeatures, RefusesWhatItCannotStrip) {
    expect_refused("int a;\n#if KVWELD_USES(LORA)\nint b;\n#else\nint c;\n#endif\n", "line 4: a KVWELD_USES guard has no #else");
    expect_refused("#if KVWELD_USES(NOPE)\n#endif\n", "line 1: unknown feature 'NOPE'");
    expect_refused("#if KVWELD_USES(LORA) && KVWELD_USES(CVEC)\n#endif\n", "line 1: a guard joins features by || only");
    expect_refused("#if KVWELD_USES(LORA)\nint a;\n", "the text ends inside a guard");
    expect_refused("int a;\n#endif\n", "line 2: #endif without its #if");
}

}  // namespace
}  // namespace kvweld::targets
