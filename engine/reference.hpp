// The reference forward pass: the oracle every decode is judged against.
// The simplest readable single-token forward over a caller-owned plain KV,
// in the spirit of llama2.c's run.c. It shares no code with the plan's
// kernels beyond the config and reads the model's weights directly.
#pragma once

#include "engine/adapters.hpp"
#include "engine/kv_type.hpp"
#include "engine/model.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace kvweld {

// A value as a KV row of `type` holds it (engine/kv_type.hpp).
float round_to(KvType type, float x);

// A plain KV: key[layer][pos * kv_dim + i], value likewise; raw_key holds
// each key before its rotation, so that a context shift can rotate a moved
// key afresh for its new position.
struct ReferenceKv {
    explicit ReferenceKv(const ModelConfig& config, KvType type = KvType::f32);
    KvType type;
    std::vector<std::vector<float>> key;
    std::vector<std::vector<float>> value;
    std::vector<std::vector<float>> raw_key;
    // Per position: 1 where an MoE layer's routing was a tie (the last
    // expert chosen and the first left out within kRoutingTieMargin), so a
    // float engine may rightly have chosen the other one.
    std::vector<std::uint8_t> routing_tie;
    // Whether any of positions 0..up_to had a routing tie: from there on
    // the reference cannot judge this sequence's rows (the engine's K/V of
    // the later layers may rightly differ), until a rewind refeeds them.
    bool routing_tied(int up_to) const;
    // A context shift of a history of `len` positions: [p0, p1) removed, the
    // later rows moved down, each moved key rotated from its raw row for its
    // new position (one rotation from scratch, where an engine composes two:
    // the data oracle judges the composition against it). A 16-bit KV
    // rotates its stored row by the distance and rounds it, as ggml does.
    void shift(const ModelConfig& config, int p0, int p1, int len);
};

// Logits for `token` at position `pos`; writes this position's K and V into
// kv. Positions 0..pos-1 of kv must already hold this request's history.
// `adapters`: the LoRA adapters (each at its scale) and control vector the
// decode runs with. `hidden`, where given, gets the hidden state after the
// final norm (dim floats: the embeddings of the position).
std::vector<float> reference_forward(const Model& model, ReferenceKv& kv, int token, int pos,
                                     const Adapters& adapters = Adapters::none(), std::vector<float>* hidden = nullptr);

// One sequence's tokens of one call, at positions first_pos.. in order:
// their logits (and hidden states, where given), each position's K and V
// written into kv. causal: each token attends to the positions up to its
// own (the same as reference_forward token by token). Not causal (llama.h's
// llama_set_causal_attn(ctx, false)): each attends to every position of
// the sequence up to the span's last, its later tokens in the call too.
std::vector<std::vector<float>> reference_forward_span(const Model& model, ReferenceKv& kv,
                                                       std::span<const int> tokens, int first_pos,
                                                       const Adapters& adapters, bool causal,
                                                       std::vector<std::vector<float>>* hidden = nullptr);

// log softmax of one position's logits, in double: each token's log
// probability (what a server reports with n_probs).
std::vector<double> log_probs(std::span<const float> logits);

// The data oracle's metric: max |got - want| / max(1, max |want|). For
// logits of order 1 it is an absolute difference; for larger ones, relative.
double logit_error(std::span<const float> got, std::span<const float> want);

// The data and kv oracles' tolerance on logit_error, one value for every
// simulator and test that judges an engine: the CPU reference and a plan
// agree to about 1e-6 (reports show it), and one stale KV row moves the
// logits by far more (sim/tests/oracles_test.cpp measures the margin).
inline constexpr double kDataTolerance = 1e-4;

// An MoE router's logits, in double here and in float in an engine, differ
// by about 1e-6 (the engine's hidden state carries its own rounding): two
// experts whose logits are closer than this may be chosen either way, and
// the two choices give logits far apart (seed 4709 on llama.cpp b11434:
// margin 4.5e-9, logit error 0.135). The reference cannot judge such a row.
inline constexpr double kRoutingTieMargin = 1e-5;

}  // namespace kvweld
