// llama.cpp in the registry ("llamacpp", "llamacpp@V"). The settings a
// seed draws: either KV layout
// (kv_unified half the time) and graph reuse mostly on (off one time in
// five, so a reload under graph_reuse=0 is drawn too), one seed in
// eight linear RoPE scaling (rope_scale=0.5), which the reference does not
// model (the twin judges those rows), and one in four pooled embeddings
// (pooling=mean or last, one in eight each); a setting given (--params) wins.
// kv_type=f16 and flash_attn=1 are never drawn: llama.cpp is not bitwise
// reproducible across contexts there (see llamacpp_reference_blind).
// The memory (arch=) is llama's KV cache unless given; arch=any draws one
// of the five per seed (llama_arch_models.hpp's), and with a memory other
// than llama's, its window (swa_window), swa_full and the snapshots for
// rollback (n_rs_seq), each from a side stream.
#include "util/cat.hpp"
#include "targets/abi_lists.hpp"
#include "targets/llamacpp/llama_arch_list.hpp"
#include "targets/llamacpp/llamacpp_entry.hpp"
#include "targets/llamacpp/llamacpp_params.hpp"
#include "targets/llamacpp/llamacpp_repro.hpp"

#ifndef LLAMACPP_PLUGIN_PATH
#define LLAMACPP_PLUGIN_PATH ""
#endif
#ifndef LLAMACPP_KNOWN_FINDINGS
#define LLAMACPP_KNOWN_FINDINGS ""
#endif
#ifndef LLAMACPP_MISSING
#define LLAMACPP_MISSING "not built"
#endif

namespace kvweld::targets {

namespace {

// The memory's settings, where arch= is given: arch=any replaced by one of
// the five, and for any but llama the ones its memory reads, unless given.
std::string draw_memory(const std::map<std::string, std::string>& given, std::string out, Rng& rng) {
    if (!given.count("arch")) return out;
    Rng side(Rng(rng).next() ^ 0x6d656d6f72792121ULL);
    std::string arch = given.at("arch");
    if (arch == "any") {
        arch = llamacpp::kArchModels[side.below(llamacpp::kArchModels.size())].name;
        out = abi::with_param(out, "arch", arch);
    }
    const std::uint64_t rs_seq = side.below(5), full = side.below(4), window = 2 + side.below(15);
    if (arch == "llama") return out;
    if (!given.count("n_rs_seq")) out += cat(",n_rs_seq=", rs_seq);
    if (!given.count("swa_full")) out += cat(",swa_full=", full == 0 ? 1 : 0);
    if (!given.count("swa_window")) out += cat(",swa_window=", window);
    return out;
}

std::string llamacpp_settings(const EngineSetup& setup, Rng& rng) {
    const auto given = abi::parse_params(setup.params.c_str(), kLlamacppSettings);
    // Every value drawn whatever is given, so a reproduce command that names
    // the drawn settings draws the same seed's later values.
    const bool unified = rng.chance(0.5), reuse = rng.chance(0.8);
    std::string out = setup.params;
    if (!given.count("kv_unified")) out += cat(out.empty() ? "" : ",", "kv_unified=", unified ? 1 : 0);
    if (!given.count("graph_reuse")) out += cat(out.empty() ? "" : ",", "graph_reuse=", reuse ? 1 : 0);
    // Drawn after the rest, so the settings above did not change for any seed.
    const bool scaled = rng.chance(0.125);
    if (!given.count("rope_scale") && scaled) out += cat(out.empty() ? "" : ",", "rope_scale=0.5");
    // Pooled embeddings one seed in four (mean or last), from a copy of the
    // stream: what the seed draws after its settings stays as it was. In a
    // process of its own (the default) mean pooling is drawn for any
    // sequence count, and llama.cpp's abort where the count does not divide
    // the reserve (pooled-mean-reserve-abort) is a known finding matched by
    // its crash; in kvweld's process (--isolate no) it would end kvweld, so
    // mean is drawn only where the count divides every n_ubatch (4 or 512).
    Rng side(Rng(rng).next() ^ 0x706f6f6c696e6721ULL);
    const auto pooling = side.below(8);
    const bool mean_fits = setup.isolation.isolate != Isolate::no || 4 % setup.seqs == 0;
    if (!given.count("pooling") && pooling < 2)
        out += cat(out.empty() ? "" : ",", "pooling=", pooling == 0 && mean_fits ? "mean" : "last");
    return draw_memory(given, out, rng);
}

// Measured for the two that are given only: with kv_type=f16 (150 seeds,
// twice) and flash_attn=1 (60 seeds), the rows of a context with graph
// reuse on and of its twin with it off differed on 1 to 4 seeds per run,
// other seeds each run, by up to 6.6e-4 in a logit: llama.cpp is not
// bitwise reproducible across contexts there, and f16 rounding amplifies a
// last-bit difference. rope_scale is f32 throughout: bitwise.
const char* llamacpp_reference_blind(const std::string& params) {
    const auto p = abi::parse_params(params.c_str(), kLlamacppSettings);
    if (p.count("arch") && p.at("arch") != "llama")
        return "llama.cpp arch other than llama: kvweld's reference forward knows llama only (the fresh prefill "
               "and the twin judge)";
    if (p.count("rope_scale") && p.at("rope_scale") != "1")
        return "llama.cpp rope_scale: kvweld's reference does not model RoPE scaling";
    if (p.count("kv_type") && p.at("kv_type") != "f32")
        return "llama.cpp kv_type other than f32: the library swarm's reference is not given the KV type (the "
               "server's rounds 16-bit rows, engine/reference.hpp; here the twin judges), and llama.cpp is not "
               "bitwise reproducible across contexts there: the twin may differ";
    if (abi::flag_param(p, "flash_attn", false))
        return "llama.cpp flash_attn=1: kvweld's reference does not model flash attention (and llama.cpp is not "
               "bitwise reproducible across contexts there: the twin may differ)";
    return nullptr;
}

// The fresh prefill judges the memories kvweld's reference does not know.
// On llama's own, the settings that blind the reference are the twin's:
// under kv_type and flash_attn a row is not reproduced by a prefill
// within 1e-4 (2.2e-4 measured: seed 0 of cli.engine_swarm_llamacpp_quantized_kv),
// and the known findings there are recorded by the oracles that saw them.
const char* llamacpp_fresh_blind(const std::string& params) {
    const auto p = abi::parse_params(params.c_str(), kLlamacppSettings);
    if (p.count("arch") && p.at("arch") != "llama") return nullptr;
    return "arch=llama: the reference forward knows it, and the twin judges the settings it does not model";
}

// kvweld writes LoRA adapters for a llama model (general.architecture
// llama), which llama.cpp refuses for a model of another ("model arch and
// LoRA arch mismatch"): none is drawn there.
std::uint32_t llamacpp_withheld(const std::string& params, const char** why) {
    const auto p = abi::parse_params(params.c_str(), kLlamacppSettings);
    if (!p.count("arch") || p.at("arch") == "llama") return 0;
    *why = "kvweld's LoRA adapters are llama's (llama.cpp refuses them for another architecture)";
    return KVWELD_CAP_LORA;
}

// A memory with a recurrent state (mamba, lfm2, lfm2_swa) keeps no state
// but each sequence's last, and with n_rs_seq that many snapshots for one
// rollback before the next decode (llama_memory_recurrent::seq_rm,
// src/llama-memory-recurrent.cpp:168-222). A removal that reaches the
// last position it rolls back within the snapshots, or refuses (llama.h:
// "Returns false if a partial sequence cannot be removed"), leaving the
// sequence as it was. A removal that ends before the last position it
// takes as a no-op, by design (ggml-org/llama.cpp PR #17009, so that a
// hybrid model can context-shift): the state keeps those tokens.
// A sliding-window cache smaller than the full one (swa_full=0) cannot
// shift at all (llama_kv_cache_iswa::get_can_shift, src/llama-kv-cache-iswa.cpp:253-257,
// which the hybrid one with a window asks too): llama_memory_can_shift
// says no, and the plugin refuses the shift, naming its range.
PartialRemoval llamacpp_partial_removal(const std::string& params, const MemoryCall& call) {
    const auto p = abi::parse_params(params.c_str(), kLlamacppSettings);
    const llamacpp::ArchModel* arch = llamacpp::find_arch(p.count("arch") ? p.at("arch") : "llama");
    const auto* shift = std::get_if<calls::Shift>(&call);
    static constexpr const char* kWindowShift =
        "a sliding-window cache smaller than the full one cannot shift (llama_memory_can_shift: "
        "llama_kv_cache_iswa::get_can_shift)";
    if (arch && arch->window && shift && !abi::flag_param(p, "swa_full", false)) return {kWindowShift, shift->p0};
    static constexpr const char* kWindowCut =
        "a sliding-window cache smaller than the full one holds a sequence from llama_memory_seq_pos_min on: a cut "
        "whose next token's window needs a position before it is refused (the plugin checks before it cuts)";
    if (const auto* t = std::get_if<calls::Truncate>(&call);
        t && t->n > 0 && arch && arch->window && !abi::flag_param(p, "swa_full", false) &&
        !llamacpp::has_recurrent_state(arch->memory))
        return {kWindowCut, t->n};
    if (!arch || !llamacpp::has_recurrent_state(arch->memory)) return {};
    static constexpr const char* kRefuse =
        "a recurrent state cannot drop positions past its n_rs_seq snapshots (llama_memory_recurrent::seq_rm "
        "returns false, as llama.h allows for a partial removal)";
    // Only these two remove part of a sequence; every other call is taken whole.
    if (const auto* t = std::get_if<calls::Truncate>(&call); t && t->n > 0) return {kRefuse, t->n};
    if (const auto* s = std::get_if<calls::Shift>(&call)) return {kRefuse, s->p0};
    return {};
}

// pooling=mean|last: each row's embeddings are its sequence's tokens of the call pooled.
abi::Pooling llamacpp_pooling(const std::string& params) {
    return abi::pooling_param(abi::parse_params(params.c_str(), kLlamacppSettings));
}

// Each KV layout with graph reuse on, beside the same with it off; a
// layout or a graph_reuse given is kept.
std::vector<StudySetting> llamacpp_study(const std::string& params, const StudyTraffic&, bool) {
    if (params.find("graph_reuse=") != std::string::npos) return {{params, ""}};
    if (!params.empty()) {
        const std::string layout = params.find("kv_unified=") == std::string::npos ? ",kv_unified=0" : "";
        return {{params + layout + ",graph_reuse=1", params + layout + ",graph_reuse=0"}};
    }
    return {{"kv_unified=0,graph_reuse=1", "kv_unified=0,graph_reuse=0"},
            {"kv_unified=1,graph_reuse=1", "kv_unified=1,graph_reuse=0"}};
}

}  // namespace

const EngineEntry kLlamacppEntry{
    .name = "llamacpp",
    .plugin = LLAMACPP_PLUGIN_PATH,
    .missing = LLAMACPP_MISSING,
    .isolated = true,  // an abort in llama.cpp is a finding, not the end of a swarm
    .rule = llamacpp_reuse_rule,
    .rule_gap = llamacpp_rule_gap,
    .draw_settings = llamacpp_settings,
    .withheld = llamacpp_withheld,
    .partial_removal = llamacpp_partial_removal,
    .fresh_blind = llamacpp_fresh_blind,
    .reference_blind = llamacpp_reference_blind,
    .pooling = llamacpp_pooling,
    .known_findings = LLAMACPP_KNOWN_FINDINGS,
    .study_settings = llamacpp_study,
    .repro = llamacpp_repro,
};

}  // namespace kvweld::targets
