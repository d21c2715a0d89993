#include "engine/adapters.hpp"

#include "util/cat.hpp"
#include "util/enum_names.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

#include <algorithm>
#include <cmath>

namespace kvweld {

namespace {

constexpr NameTable<LoraTarget, kLoraTargets> kTargets{{
    {LoraTarget::wq, "attn_q"},
    {LoraTarget::wv, "attn_v"},
    {LoraTarget::w2, "ffn_down"},
}};

// A rank far past any model's width is a corrupt file, not an adapter.
constexpr int kMaxRank = 256;

std::size_t sz(int v) { return static_cast<std::size_t>(v); }

}  // namespace

std::string_view to_string(LoraTarget t) { return name_in(kTargets, t); }

std::array<int, 2> lora_shape(const ModelConfig& c, LoraTarget t) {
    switch (t) {
        case LoraTarget::wq: return {c.q_dim(), c.dim};
        case LoraTarget::wv: return {c.kv_dim(), c.dim};
        case LoraTarget::w2: return {c.dim, c.ffn_dim};
    }
    return {0, 0};
}

// An MoE layer has no one ffn_down (llama.cpp names its experts'
// ffn_down_exps, a 3-d tensor): adapters leave it alone.
bool lora_adapts(const ModelConfig& c, LoraTarget t) { return !(t == LoraTarget::w2 && c.moe()); }

LoraAdapter::LoraAdapter(const ModelConfig& config, int rank, float alpha)
    : config_(config), rank_(rank), alpha_(alpha) {
    config_.validate();
    require(rank >= 1 && rank <= kMaxRank, "LoRA rank ", rank, ": must be in 1..", kMaxRank);
    require(std::isfinite(alpha), "LoRA alpha ", alpha, ": must be finite");
    matrices_.resize(sz(config_.n_layers) * kLoraTargets);
    for (int l = 0; l < config_.n_layers; ++l)
        for (int t = 0; t < kLoraTargets; ++t) {
            const auto [n_out, n_in] = lora_shape(config_, LoraTarget(t));
            LoraMatrix& m = matrix_mut(l, LoraTarget(t));
            m.rank = lora_adapts(config_, LoraTarget(t)) ? rank : 0;
            m.a.assign(sz(rank) * sz(n_in), 0.0f);
            m.b.assign(sz(n_out) * sz(rank), 0.0f);
        }
}

std::shared_ptr<const LoraAdapter> LoraAdapter::random(const ModelConfig& config, int rank, float alpha,
                                                       std::uint64_t seed) {
    auto out = std::make_shared<LoraAdapter>(config, rank, alpha);
    Rng rng(seed);
    // A keeps unit gain (as Model::random's weights); B a quarter of it, so
    // that alpha / r = 1 moves W x by a fraction of itself.
    auto gain = [](int fan_in) { return std::sqrt(3.0f / float(fan_in)); };
    for (int l = 0; l < config.n_layers; ++l)
        for (int t = 0; t < kLoraTargets; ++t) {
            const int n_in = lora_shape(config, LoraTarget(t))[1];
            LoraMatrix& m = out->matrix_mut(l, LoraTarget(t));
            for (float& v : m.a) v = rng.symmetric(gain(n_in));
            for (float& v : m.b) v = rng.symmetric(0.25f * gain(rank));
        }
    return out;
}

const LoraMatrix& LoraAdapter::matrix(int layer, LoraTarget t) const {
    return matrices_[sz(layer) * kLoraTargets + sz(int(t))];
}

LoraMatrix& LoraAdapter::matrix_mut(int layer, LoraTarget t) {
    return matrices_[sz(layer) * kLoraTargets + sz(int(t))];
}

ControlVector ControlVector::random(const ModelConfig& c, std::uint64_t seed, int start, int end) {
    ControlVector v;
    v.dim = c.dim;
    v.start = start;
    v.end = end;
    v.data.resize(sz(c.n_layers) * sz(c.dim));
    Rng rng(seed);
    // Of the order of the residual stream's entries: a shift the logits show.
    for (float& x : v.data) x = rng.symmetric(0.5f);
    return v;
}

void Adapters::set_loras(const ModelConfig& config, std::vector<LoraUse> uses) {
    for (std::size_t i = 0; i < uses.size(); ++i) {
        const LoraUse& u = uses[i];
        require(u.adapter != nullptr, "LoRA use ", i, ": no adapter");
        require(u.adapter->config() == config, "LoRA adapter ", i, " is for a model of another shape (",
                u.adapter->config().describe(), "; the engine's is ", config.describe(), "): nothing changed");
        require(std::isfinite(u.scale), "LoRA adapter ", i, ": scale ", u.scale, " is not finite: nothing changed");
        for (std::size_t j = 0; j < i; ++j)
            require(uses[j].adapter->id() != u.adapter->id(), "LoRA adapter ", i, " is adapter ", j,
                    " again: an adapter is in a set once; nothing changed");
    }
    const bool same_set = uses.size() == loras_.size() &&
                          std::equal(uses.begin(), uses.end(), loras_.begin(), [](const LoraUse& a, const LoraUse& b) {
                              return a.adapter->id() == b.adapter->id();
                          });
    const bool same_scales =
        same_set && std::equal(uses.begin(), uses.end(), loras_.begin(),
                               [](const LoraUse& a, const LoraUse& b) { return a.scale == b.scale; });
    if (!same_set) set_id_ = AdapterSetId::mint();
    if (!same_scales) ++scales_version_;
    loras_ = std::move(uses);
}

void Adapters::set_cvec(const ModelConfig& config, std::optional<ControlVector> cvec) {
    if (cvec) {
        const std::size_t want = sz(config.n_layers) * sz(config.dim);
        require(cvec->dim == config.dim, "control vector of dim ", cvec->dim, ": the model's is ", config.dim,
                "; nothing changed");
        require(cvec->data.size() == want, "control vector of ", cvec->data.size(), " floats: the model needs ",
                want, " (", config.n_layers, " layers x ", config.dim, "); nothing changed");
        require(cvec->start >= 0 && cvec->start <= cvec->end && cvec->end < config.n_layers, "control vector range [",
                cvec->start, ", ", cvec->end, "]: must lie in 0..", config.n_layers - 1,
                ", start <= end; nothing changed");
        require(std::all_of(cvec->data.begin(), cvec->data.end(), [](float x) { return std::isfinite(x); }),
                "control vector holds a value that is not finite; nothing changed");
    }
    if (cvec_ == cvec) return;
    cvec_ = std::move(cvec);
    ++cvec_version_;
}

void Adapters::set_warmup(bool on) {
    if (warmup_ == on) return;
    warmup_ = on;
    ++warmup_version_;
}

const Adapters& Adapters::none() {
    static const Adapters kNone;
    return kNone;
}

void lora_reference_add(float* out, const float* x, const LoraMatrix& m, int n_in, int n_out, float factor) {
    std::vector<double> ax(sz(m.rank));
    for (int r = 0; r < m.rank; ++r) {
        const float* row = m.a.data() + sz(r) * sz(n_in);
        double sum = 0.0;
        for (int j = 0; j < n_in; ++j) sum += double(row[j]) * x[j];
        ax[sz(r)] = sum;
    }
    for (int i = 0; i < n_out; ++i) {
        const float* row = m.b.data() + sz(i) * sz(m.rank);
        double sum = 0.0;
        for (int r = 0; r < m.rank; ++r) sum += double(row[r]) * ax[sz(r)];
        out[i] += static_cast<float>(factor * sum);
    }
}

}  // namespace kvweld
