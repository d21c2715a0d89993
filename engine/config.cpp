#include "engine/config.hpp"

#include "util/cat.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"


namespace kvweld {

namespace {
constexpr NameTable<Family, 2> kFamilies{{{Family::llama, "llama"}, {Family::qwen3, "qwen3"}}};
constexpr NameTable<Dtype, 1> kDtypes{{{Dtype::f32, "f32"}}};
}  // namespace

std::string_view to_string(Family f) { return name_in(kFamilies, f); }
Family family_from_string(std::string_view s) { return parse_in(kFamilies, s, "model family"); }
std::string_view to_string(Dtype d) { return name_in(kDtypes, d); }

namespace {

void require_positive(int value, const char* field, int limit = 1 << 20) {
    require(value > 0 && value <= limit,
            "ModelConfig.", field, " = ", value, ": must be in 1..", limit);
}

}  // namespace

void ModelConfig::validate() const {
    require_positive(vocab, "vocab", 1 << 22);
    require_positive(dim, "dim", 1 << 16);
    require_positive(n_layers, "n_layers", 1024);
    require_positive(n_heads, "n_heads", 1024);
    require_positive(n_kv_heads, "n_kv_heads", 1024);
    require_positive(head_dim, "head_dim", 4096);
    require_positive(ffn_dim, "ffn_dim", 1 << 18);
    require_positive(max_seq_len, "max_seq_len", 1 << 20);
    require(n_heads % n_kv_heads == 0,
            "ModelConfig.n_heads = ", n_heads, " is not a multiple of n_kv_heads = ",
                n_kv_heads);
    require(head_dim % 2 == 0,
            "ModelConfig.head_dim = ", head_dim, " must be even (RoPE rotates pairs)");
    require(family != Family::llama || q_dim() == dim,
            "ModelConfig.dim = ", dim, " must equal n_heads * head_dim = ", q_dim(),
                " for llama");
    require(rope_theta > 0.0f, "ModelConfig.rope_theta = ", rope_theta, " must be > 0");
    require(n_experts == 0 ? n_experts_used == 0 : n_experts >= 2 && n_experts <= kMaxExperts,
            "ModelConfig.n_experts = ", n_experts, ": must be 0 (dense) or in 2..", kMaxExperts,
            n_experts == 0 ? cat(", and n_experts_used = ", n_experts_used, " must then be 0") : "");
    require(n_experts == 0 || (n_experts_used >= 1 && n_experts_used <= n_experts),
            "ModelConfig.n_experts_used = ", n_experts_used, ": must be in 1..n_experts = ", n_experts);
    require(norm_eps > 0.0f && norm_eps < 1.0f,
            "ModelConfig.norm_eps = ", norm_eps, " must be in (0, 1)");
}

std::string ModelConfig::describe() const {
    return cat(to_string(family), " vocab=", vocab, " dim=", dim, " layers=", n_layers,
               " heads=", n_heads, " kv_heads=", n_kv_heads, " head_dim=", head_dim,
               " ffn=", ffn_dim, moe() ? cat(" experts=", n_experts_used, "/", n_experts) : "",
               " max_seq_len=", max_seq_len);
}

}  // namespace kvweld
