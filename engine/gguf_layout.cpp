#include "engine/gguf_layout.hpp"

#include "util/cat.hpp"

namespace kvweld::gguf {

std::vector<Tensor> model_tensors(const Model& m) {
    const ModelConfig& c = m.config();
    const auto d = std::uint64_t(c.dim), q = std::uint64_t(c.q_dim()), kv = std::uint64_t(c.kv_dim()),
               f = std::uint64_t(c.ffn_dim), v = std::uint64_t(c.vocab);
    std::vector<Tensor> t = {{"token_embd.weight", {d, v}, m.embedding()}};
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights w = m.layer(l);
        const std::string b = cat("blk.", l, ".");
        t.push_back({b + "attn_norm.weight", {d}, w.att_norm});
        t.push_back({b + "attn_q.weight", {d, q}, w.wq});
        t.push_back({b + "attn_k.weight", {d, kv}, w.wk});
        t.push_back({b + "attn_v.weight", {d, kv}, w.wv});
        t.push_back({b + "attn_output.weight", {q, d}, w.wo});
        t.push_back({b + "ffn_norm.weight", {d}, w.ffn_norm});
        if (c.moe()) {
            // Experts stacked on ggml's last axis: kvweld's [expert][out][in].
            const auto e = std::uint64_t(c.n_experts);
            t.push_back({b + "ffn_gate_inp.weight", {d, e}, w.router});
            t.push_back({b + "ffn_gate_exps.weight", {d, f, e}, w.w1});
            t.push_back({b + "ffn_up_exps.weight", {d, f, e}, w.w3});
            t.push_back({b + "ffn_down_exps.weight", {f, d, e}, w.w2});
            continue;
        }
        t.push_back({b + "ffn_gate.weight", {d, f}, w.w1});
        t.push_back({b + "ffn_up.weight", {d, f}, w.w3});
        t.push_back({b + "ffn_down.weight", {f, d}, w.w2});
    }
    t.push_back({"output_norm.weight", {d}, m.final_norm()});
    t.push_back({"output.weight", {d, v}, m.classifier()});
    return t;
}

// kvweld's [r][n_in] and [n_out][r] are ggml's ne {n_in, r} and {r, n_out}.
std::vector<Tensor> lora_tensors(const LoraAdapter& adapter) {
    const ModelConfig& c = adapter.config();
    std::vector<Tensor> out;
    for (int l = 0; l < c.n_layers; ++l)
        for (int t = 0; t < kLoraTargets; ++t) {
            const LoraMatrix& m = adapter.matrix(l, LoraTarget(t));
            if (m.rank == 0) continue;
            const auto [n_out, n_in] = lora_shape(c, LoraTarget(t));
            const auto r = std::uint64_t(m.rank);
            const std::string name = cat("blk.", l, ".", to_string(LoraTarget(t)), ".weight.lora_");
            out.push_back({name + "a", {std::uint64_t(n_in), r}, m.a});
            out.push_back({name + "b", {r, std::uint64_t(n_out)}, m.b});
        }
    return out;
}

}  // namespace kvweld::gguf
