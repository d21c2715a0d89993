#include "sim/model_json.hpp"

#include "util/error.hpp"
#include "engine/model.hpp"
#include "sim/json_field.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim {

nlohmann::json model_to_json(const std::string& name, const ModelConfig& model, std::uint64_t weights_seed) {
    nlohmann::json j = {{"name", name},
            {"family", to_string(model.family)},
            {"vocab", model.vocab},
            {"dim", model.dim},
            {"n_layers", model.n_layers},
            {"n_heads", model.n_heads},
            {"n_kv_heads", model.n_kv_heads},
            {"head_dim", model.head_dim},
            {"ffn_dim", model.ffn_dim},
            {"max_seq_len", model.max_seq_len},
            {"rope_theta", model.rope_theta},
            {"norm_eps", model.norm_eps},
            {"weights_seed", weights_seed}};
    // Written only for an MoE model: a dense model's trace reads as before.
    if (model.moe()) j.update({{"n_experts", model.n_experts}, {"n_experts_used", model.n_experts_used}});
    return j;
}

ModelConfig model_from_json(const nlohmann::json& m) {
    ModelConfig c;
    c.family = family_from_string(json_field<std::string>(m, "family"));
    c.vocab = json_field<int>(m, "vocab");
    c.dim = json_field<int>(m, "dim");
    c.n_layers = json_field<int>(m, "n_layers");
    c.n_heads = json_field<int>(m, "n_heads");
    c.n_kv_heads = json_field<int>(m, "n_kv_heads");
    c.head_dim = json_field<int>(m, "head_dim");
    c.ffn_dim = json_field<int>(m, "ffn_dim");
    c.max_seq_len = json_field<int>(m, "max_seq_len");
    c.rope_theta = json_field<float>(m, "rope_theta");
    c.norm_eps = json_field<float>(m, "norm_eps");
    if (m.contains("n_experts")) {
        c.n_experts = json_field<int>(m, "n_experts");
        c.n_experts_used = json_field<int>(m, "n_experts_used");
    }
    c.validate();
    // A trace is input: refuse a model no simulation here could hold.
    const std::size_t limit = std::size_t{1} << 28;
    const std::size_t floats = Model::weight_count(c, false);
    require(floats <= limit, "model of ", floats, " weights is too large to simulate (limit ", limit, ")");
    return c;
}

}  // namespace kvweld::sim
