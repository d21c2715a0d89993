// Each engine call as the llama.cpp plugin makes it (the memory calls from
// the one table both use, llamacpp_memory_steps.hpp; the rest mirror
// llamacpp_engine_plugin.cpp's functions of the same names), written once
// for both contexts: `for (Side* s : live(both))` runs a line on the engine
// and its ground truth, `live(engine_only)` on the engine alone (an op the
// ground truth skips). The model and every adapter are generated in the
// program with its own seeded generator (kvweld's weights are not needed:
// the tokens are the trace's, and each side reads the same model).
#include "targets/llamacpp/llamacpp_repro.hpp"

#include "engine/adapters.hpp"
#include "targets/abi_lists.hpp"
#include "targets/llamacpp/llamacpp_memory_steps.hpp"
#include "targets/llamacpp/llamacpp_params.hpp"
#include "targets/strip_features.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/overloaded.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

namespace kvweld::targets {

namespace {

// A float as a C++ literal that reads back the same.
std::string float_literal(float x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", double(x));
    std::string out = text;
    if (out.find_first_of(".en") == std::string::npos) out += ".0";
    return out + "f";
}

class LlamacppRepro final : public ReproWriter {
public:
    explicit LlamacppRepro(ReproSetup setup) : setup_(std::move(setup)) {}

    void op(int line) override {
        line_ = line;
        skipped_ = std::find(setup_.truth.skip.begin(), setup_.truth.skip.end(), line) != setup_.truth.skip.end();
    }

    void call(const MemoryCall& call) override {
        std::visit(Overloaded{
                       [&](const calls::Open& c) { steps(llama_steps::empty(c.seq)); },
                       [&](const calls::Close& c) { steps(llama_steps::empty(c.seq)); },
                       [&](const calls::Clear& c) { steps(llama_steps::empty(c.seq)); },
                       [&](const calls::Truncate& c) { steps(llama_steps::truncate(c.seq, c.n)); },
                       [&](const calls::Copy& c) { steps(llama_steps::copy(c.src, c.dst)); },
                       [&](const calls::ClearAll&) { steps(llama_steps::clear_all()); },
                       [&](const calls::Keep& c) { steps(llama_steps::keep(c.seq)); },
                       [&](const calls::Shift& c) { steps(llama_steps::shift(c.seq, c.p0, c.p1)); },
                       [&](const calls::Save& c) { use("STATE"); each(cat("save(*s, ", c.seq, ", ", c.id, ");")); },
                       [&](const calls::Load& c) { use("STATE"); each(cat("load(*s, ", c.seq, ", ", c.id, ", ", c.len, ");")); },
                       [&](const calls::LoadRefused&) {},  // made of the plugin's own header check, not llama.cpp
                       [&](const calls::SetLoras& c) { use("LORA"); set_loras(c); },
                       [&](const calls::SetCvec& c) { use("CVEC"); set_cvec(c); },
                       [&](const calls::SetWarmup& c) {
                           use("WARMUP");
                           each(cat("llama_set_warmup(s->ctx, ", c.on ? "true" : "false", ");"));
                       },
                       [&](const calls::SetLive& c) {  // as the plugin's set_live
                           if (c.key == abi::kEmbeddingsKey) {
                               use("EMBD");
                               return each(cat("llama_set_embeddings(s->ctx, s->embeddings = ", c.value == "1" ? "true" : "false", ");"));
                           }
                           if (c.key == abi::kCausalKey)
                               return each(cat("llama_set_causal_attn(s->ctx, ", c.value == "1" ? "true" : "false", ");"));
                           require(c.key == "n_threads", "repro: the live setting ", c.key, " has no llama.h call here");
                           each(cat("llama_set_n_threads(s->ctx, ", c.value, ", ", c.value, ");"));
                       },
                       [&](const calls::SetSampler& c) { use("SAMPLER"); set_sampler(c); },
                       [&](const calls::Reload&) { not_written("a reload"); },
                       [&](const calls::OpenSized&) { not_written("a white-box open"); },
                       [&](const calls::SwapLayer&) { not_written("a white-box layer swap"); },
                       [&](const calls::PoolOp&) { not_written("a white-box pool op"); },
                       [&](const calls::Migrate&) { not_written("a white-box migrate"); },
                   },
                   call);
    }

    [[noreturn]] void not_written(const char* what) const {
        throw Error(cat("repro: trace line ", line_, ": this call (", what, ") is not written as llama.h calls yet; "
                        "shrink the trace without it"));
    }

    void decode(std::span<const ReproPair> pairs) override { each(cat("decode(*s, {", tokens(pairs), "});")); }

    // Both contexts' callbacks, as kvweld arms its twin's: each must stop
    // in the same call and keep what kvweld's run read back.
    void abort(int after) override {
        use("ABORT");
        each(cat("s->abort_after = ", after, ";"));
    }
    void aborted(const std::map<int, int>& lengths) override {
        use("ABORT");
        std::string held;
        for (const auto& [seq, n] : lengths) held += cat(held.empty() ? "" : ", ", "{", seq, ", ", n, "}");
        each(cat("expect_kept(*s, {", held, "});"));
    }

    int call_lines() const override { return call_lines_; }
    std::string finish() override;

private:
    static std::string tokens(std::span<const ReproPair> pairs) {  // a decode's {seq, token, pos, out} list
        std::string out;
        for (const ReproPair& p : pairs)
            out += cat(out.empty() ? "" : ", ", "{", p.seq, ", ", p.token, ", ", p.pos, ", ", p.output ? 1 : 0, "}");
        return out;
    }
    // A feature of the prelude the program uses: one of the names its guards use.
    void use(const char* feature) {
        require(repro_features().count(feature), "repro: no prelude feature '", feature, "' (strip_features.hpp)");
        uses_.insert(feature);
    }
    // A statement on both sides, or on the engine alone for an op the ground truth skips.
    void each(const std::string& statement) {
        ops_ += cat("    for (Side* s : live(", skipped_ ? "engine_only" : "both", ", ", line_, ")) ", statement, "\n");
        ++call_lines_;
    }
    // An engine call's llama.h memory calls, as the plugin runs them (the
    // one table: llamacpp_memory_steps.hpp); a checked seq_rm must succeed.
    void steps(const std::vector<llama_steps::Step>& steps) {
        using llama_steps::Fn;
        for (const llama_steps::Step& t : steps) switch (t.fn) {
                case Fn::seq_rm: {
                    const std::string rm = cat("llama_memory_seq_rm(s->mem(), ", t.seq, ", ", t.p0, ", ", t.p1, ")");
                    each(t.checked ? cat("expect(*s, ", rm, ", \"llama_memory_seq_rm\");") : rm + ";");
                    break;
                }
                case Fn::seq_cp:
                    each(cat("llama_memory_seq_cp(s->mem(), ", t.seq, ", ", t.dst, ", ", t.p0, ", ", t.p1, ");"));
                    break;
                case Fn::seq_add:
                    each(cat("llama_memory_seq_add(s->mem(), ", t.seq, ", ", t.p0, ", ", t.p1, ", ", t.delta, ");"));
                    break;
                case Fn::clear: each("llama_memory_clear(s->mem(), true);"); break;
                case Fn::seq_keep: each(cat("llama_memory_seq_keep(s->mem(), ", t.seq, ");")); break;
            }
    }
    void set_loras(const calls::SetLoras& c);
    void set_sampler(const calls::SetSampler& c);
    void set_cvec(const calls::SetCvec& c);
    std::string settings_text(const std::string& params) const;

    ReproSetup setup_;
    std::string ops_;
    int line_ = 0, call_lines_ = 0;
    bool skipped_ = false;
    std::set<std::string> uses_;  // the prelude's features the program uses (strip_features.hpp)
    // The adapters and control vectors met, in order: the program makes its own of each.
    std::map<AdapterId, int> loras_;
    std::vector<std::pair<int, float>> lora_shapes_;  // rank, alpha
    std::vector<std::vector<float>> cvecs_;
};

void LlamacppRepro::set_loras(const calls::SetLoras& c) {
    std::string adapters, scales;
    for (const LoraUse& use : c.uses) {
        const auto [it, fresh] = loras_.emplace(use.adapter->id(), int(loras_.size()));
        if (fresh) lora_shapes_.emplace_back(use.adapter->rank(), use.adapter->alpha());
        adapters += cat(adapters.empty() ? "" : ", ", "lora[", it->second, "]");
        scales += cat(scales.empty() ? "" : ", ", float_literal(use.scale));
    }
    each(cat("expect(*s, compat::set_adapters(s->ctx, {", adapters, "}, {", scales, "}) == 0, \"the LoRA adapters\");"));
}

// As the plugin's set_sampler: a new chain, one changed in place (the same
// object refilled, not given again), or none. With the truth new-chains,
// the ground truth sets a new chain where the engine changes one in place.
void LlamacppRepro::set_sampler(const calls::SetSampler& c) {
    if (!c.spec) return use("CHAIN_CLEAR"), each(cat("clear_chain(*s, ", c.seq, ");"));
    const std::string args = cat(c.seq, ", ", c.spec->top_k, ", ", c.spec->seed, "u");
    if (!c.in_place) return each(cat("set_chain(*s, ", args, ", false);"));
    if (!setup_.truth.new_chains || skipped_) return each(cat("set_chain(*s, ", args, ", true);"));
    each(cat("set_chain(*s, ", args, ", s == &engine);  // the ground truth: a new chain in its place"));
}

// llama.cpp's layout: one row per layer from 1 (layer 0's is never added).
void LlamacppRepro::set_cvec(const calls::SetCvec& c) {
    if (!c.cvec) {
        each("expect(*s, compat::set_cvec(s->ctx, nullptr, 0, 0, -1, -1) == 0, \"clearing the control vector\");");
        return;
    }
    const auto it = std::find(cvecs_.begin(), cvecs_.end(), c.cvec->data);
    const auto k = std::size_t(it - cvecs_.begin());
    if (it == cvecs_.end()) cvecs_.push_back(c.cvec->data);
    each(cat("expect(*s, compat::set_cvec(s->ctx, cvec[", k, "].data(), cvec[", k, "].size(), dims.dim, ", c.cvec->start,
             ", ", c.cvec->end, ") == 0, \"the control vector\");"));
}

std::string LlamacppRepro::settings_text(const std::string& params) const {
    const auto p = abi::parse_params(params.c_str(), kLlamacppSettings);
    for (const char* unmodelled : {"kv_type", "flash_attn"})
        require(!p.count(unmodelled), "repro: the setting ", unmodelled, " is not written into reproducers (F32 KV, "
                                      "flash attention off)");
    // Another memory's model is made from metadata, which a reproducer
    // does not write yet (docs/findings/candidates/ holds such programs by hand).
    require(!p.count("arch") || p.at("arch") == "llama", "repro: the setting arch=", p.count("arch") ? p.at("arch") : "",
            " is not written into reproducers yet (they load the trace's llama GGUF)");
    const float scale = p.count("rope_scale") ? std::stof(p.at("rope_scale")) : 1.0f;
    const std::string n_ubatch = p.count("n_ubatch") ? p.at("n_ubatch") : "512";  // as the plugin reads it
    // The plugin's pooling names, as llama.h's (unset: the context's default, as the plugin leaves it).
    constexpr const char* kPoolings[] = {"LLAMA_POOLING_TYPE_NONE", "LLAMA_POOLING_TYPE_MEAN", "LLAMA_POOLING_TYPE_LAST"};
    const std::string pooling =
        p.count("pooling") ? kPoolings[int(abi::pooling_value(p.at("pooling")))] : "LLAMA_POOLING_TYPE_UNSPECIFIED";
    return cat(setup_.n_ctx, ", ", setup_.seqs, ", ", abi::flag_param(p, "kv_unified", false) ? "true" : "false", ", ",
               abi::flag_param(p, "graph_reuse", true) ? "true" : "false", ", ", float_literal(scale), ", ", n_ubatch,
               ", ", pooling);
}

std::string LlamacppRepro::finish() {
    const ModelConfig& m = *setup_.model;
    require(m.family == Family::llama, "repro: only llama-family models are written as GGUF");
    if (m.n_experts > 0) use("MOE");
    // The truth's settings: the engine's, with the truth's own given after
    // them (the later wins); the engine's: the trace's, then engine.k=v.
    const auto merged = [](const std::string& first, const std::string& then) {
        std::map<std::string, std::string> all = abi::parse_params(first.c_str(), kLlamacppSettings);
        for (const auto& [key, value] : abi::parse_params(then.c_str(), kLlamacppSettings)) all[key] = value;
        std::string out;
        for (const auto& [key, value] : all) out += cat(out.empty() ? "" : ",", key, "=", value);
        return out;
    };
    const std::string engine_params = merged(setup_.params, setup_.truth.engine_params);
    const std::string truth_params = merged(setup_.params, setup_.truth.params);
    // The LoRA adapters are freed with the model (llama.h, llama_adapter_lora_free).
    std::string adapters;
    if (!lora_shapes_.empty()) {
        std::string matrices;
        for (int t = 0; t < kLoraTargets; ++t)
            if (lora_adapts(m, LoraTarget(t))) {
                const auto [n_out, n_in] = lora_shape(m, LoraTarget(t));
                matrices += cat(matrices.empty() ? "" : ", ", "{\"", to_string(LoraTarget(t)), "\", ", n_out, ", ", n_in, "}");
            }
        std::string loaded;
        for (std::size_t k = 0; k < lora_shapes_.size(); ++k)
            loaded += cat(k ? ", " : "", "load_lora(model, dims, ", 1000 + k, ", ", lora_shapes_[k].first, ", ",
                          float_literal(lora_shapes_[k].second), ", {", matrices, "})");
        adapters += cat("    const std::vector<llama_adapter_lora*> lora{", loaded,
                        "};  // the trace's LoRA adapters, each generated here\n",
                        "    if (std::count(lora.begin(), lora.end(), nullptr)) return 2;\n");
    }
    for (std::size_t k = 0; k < cvecs_.size(); ++k)
        adapters += cat(k == 0 ? "    std::vector<std::vector<float>> cvec;  // the trace's control vectors, each generated here\n" : "",
                        "    cvec.push_back(random_floats(", 2000 + k, ", uint64_t(dims.dim) * (dims.layers - 1), 0.5f));\n");
    // The two headers stripped to what the program uses, their includes once;
    // a test in llama.cpp's own tree carries the newest llama.h's calls alone.
    if (setup_.truth.count_reuse) use("REUSE");
    const bool test = setup_.upstream_test;
    const Stripped compat = strip_features(test ? kLlamaNewestText : kLlamaCompatText, uses_),
                   prelude = strip_features(kLlamacppReproPrelude, uses_);
    std::set<std::string> all_includes = compat.includes;
    all_includes.insert(prelude.includes.begin(), prelude.includes.end());
    std::string includes;
    for (const std::string& line : all_includes) includes += line + "\n";
    std::string out = cat(
        test ? cat("// A test of ", setup_.title, ", written by kvweld from its trace (", setup_.command,
                   "). It writes a seeded random model (nothing downloaded) and loads it.\n")
             : cat("// A standalone reproducer of ", setup_.title, ", written by kvweld from its trace (", setup_.command,
                   ").\n// It uses llama.h and libllama alone: c++ -std=c++20 repro.cpp -I<llama.cpp>/include "
                   "-L<llama.cpp>/lib -lllama -lggml -lggml-base -o repro\n"),
        "// The engine: one llama.cpp context, as a server drives it (", engine_params.empty() ? "defaults" : engine_params,
        setup_.truth.engine_params.empty() ? "" : cat("; kvweld ran the trace without ", setup_.truth.engine_params,
                                                      ", which its plugin refuses"),
        "). The ground truth: a second context of the same model (", truth_params, ")",
        setup_.truth.skip.empty() ? "" : ", which skips the ops marked so",
        setup_.truth.new_chains ? ", which sets a new sampler chain where the engine changes one in place" : "",
        ", given the same calls",
        setup_.truth.count_reuse ? "; the engine must reuse its graph as often as the ground truth" : "",
        ".\n// Exit 1: the finding shows (the numbers are printed); 0: it does not", test ? "; 2: it could not run" : "",
        ".\n\n", includes,
        test ? "\n// ---- kvweld's llama_newest.hpp (llama.h's calls by the names below) and llamacpp_repro_prelude.hpp, "
               "stripped to this test ----\n"
             : "\n// ---- kvweld's llama_compat.hpp (what llama.h renamed between releases) and llamacpp_repro_prelude.hpp, "
               "stripped to this program ----\n",
        compat.text, prelude.text,
        "\nint main() {\n",
        "    const Dims dims{", m.dim, ", ", m.n_layers, ", ", m.n_heads, ", ", m.n_kv_heads, ", ", m.head_dim, ", ",
        m.ffn_dim, ", ", m.vocab, ", ", m.max_seq_len, ", ", m.n_experts, ", ", m.n_experts_used, ", ", float_literal(m.rope_theta),
        ", ", float_literal(m.norm_eps), "};\n",
        "    llama_model* model = start(dims);\n    if (!model) return 2;\n", adapters,
        "    Side engine{open_context(model, ", settings_text(engine_params), ")};\n",
        "    Side truth{open_context(model, ", settings_text(truth_params), ")};\n",
        "    if (!engine.ctx || !truth.ctx) return 2;\n",
        "    const std::vector<Side*> both{&engine, &truth}",
        ops_.find("live(engine_only,") != std::string::npos ? ", engine_only{&engine}" : "",
        ";\n",
        uses_.count("ABORT") ? "    for (Side* s : both) llama_set_abort_callback(s->ctx, abort_check, s);\n" : "", ops_,
        "    const int verdict = report(engine, truth, 1e-3);\n",
        "    for (Side* s : both) llama_free(s->ctx);\n",
        uses_.count("SAMPLER") ? "    for (Side* s : both) for (llama_sampler* chain : s->chains) llama_sampler_free(chain);\n" : "",
        "    llama_model_free(model);\n    std::filesystem::remove_all(dir);\n    return verdict;\n}\n");
    return out;
}

}  // namespace

std::unique_ptr<ReproWriter> llamacpp_repro(const ReproSetup& setup) { return std::make_unique<LlamacppRepro>(setup); }

}  // namespace kvweld::targets
