// Helpers shared by the engine tests.
#pragma once

#include "engine/error.hpp"
#include "engine/model.hpp"
#include "engine/reference.hpp"
#include "engine/rng.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace kvweld::testing {

// On logit_error() (engine/reference.hpp), the data oracle's one metric:
// for logits of order 1 an absolute 1e-4.
inline constexpr double kCpuTolerance = 1e-4;

// The oracle for one request: the reference forward over a shadow KV built
// from the request's own token history.
class Shadow {
public:
    explicit Shadow(const Model& model) : model_(&model), kv_(model.config()) {}
    std::vector<float> step(int token) { return reference_forward(*model_, kv_, token, pos_++); }
    void truncate_to(int n) { pos_ = n; }
    void use_model(const Model& model) { model_ = &model; }
    int pos() const { return pos_; }

private:
    const Model* model_;
    ReferenceKv kv_;
    int pos_ = 0;
};

inline std::vector<int> random_tokens(int n, int vocab, std::uint64_t seed) {
    Rng rng(seed);
    std::vector<int> out(n);
    for (int& t : out) t = static_cast<int>(rng.below(static_cast<std::uint64_t>(vocab)));
    return out;
}

// Runs fn and expects an Error whose message contains every fragment.
template <class Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> fragments) {
    try {
        fn();
        ADD_FAILURE() << "expected kvweld::Error";
    } catch (const Error& e) {
        const std::string what = e.what();
        for (const std::string& f : fragments)
            EXPECT_NE(what.find(f), std::string::npos) << "message '" << what << "' lacks '" << f << "'";
    }
}

}  // namespace kvweld::testing
