// Helpers shared by the engine tests.
#pragma once

#include "engine/adapters.hpp"
#include "engine/decode_session.hpp"
#include "util/error.hpp"
#include "engine/faults.hpp"
#include "engine/model.hpp"
#include "engine/reference.hpp"
#include "util/rng.hpp"

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
// A change that must show in the logits moves them by far more than the
// tolerance (a stale plan is plain, not marginal).
inline constexpr double kMargin = 100 * kCpuTolerance;

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

// The set of one fault switch, for a ScopedFaults.
inline FaultSet only(Fault f) {
    FaultSet s;
    s.add(f);
    return s;
}

// One request decoded with an adapter state that the test changes between
// steps (the contract rows of engine/adapters.hpp and of warmup).
class AdaptedDecode {
public:
    explicit AdaptedDecode(Model m) : model(std::move(m)) {}

    // Decodes `token` with the adapters held now: the logits' error against
    // the reference with the same adapters. With `other`, also the error
    // against the reference under other adapters from the same history,
    // for the half that shows a change mattered.
    double step(int token, const Adapters* other = nullptr, double* other_error = nullptr) {
        const std::span<const float> got = session.decode(model, cache, token, adapters);
        const std::vector<float> logits(got.begin(), got.end());
        if (other) {
            ReferenceKv copy = shadow;
            *other_error = logit_error(logits, reference_forward(model, copy, token, pos, *other));
        }
        return logit_error(logits, reference_forward(model, shadow, token, pos++, adapters));
    }
    void prefill(int n) {
        for (int t : random_tokens(n, model.config().vocab, 5)) ASSERT_LE(step(t), kCpuTolerance);
    }
    std::uint64_t builds() const { return session.counters().builds; }
    // Forgets the last decoded row (a faulty plan wrote it wrong).
    void undo() { cache.truncate_to(--pos); }

    Model model;
    KvCache cache = KvCache::with_capacity(model.config());
    DecodeSession session;
    Adapters adapters;
    ReferenceKv shadow{model.config()};
    int pos = 0;
};

}  // namespace kvweld::testing
