// A server run's settings (server_settings.hpp): drawn per seed,
// their flags, and the one description of their fields that JSON and the
// shrinker read.
#include "sim/server/server_settings.hpp"

#include "sim/json_field.hpp"
#include "sim/server/server_exchange.hpp"
#include "targets/llamacpp/llama_arch_list.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"
#include "util/overloaded.hpp"
#include "util/rng.hpp"

#include <algorithm>
#include <array>
#include <variant>

namespace kvweld::sim::server {

namespace {

using S = ServerSettings;

// One field: its JSON name and member; for an int, its range. `before`:
// the JSON value a trace written before the field existed had (null: every
// trace has it). `simplest`: the shrinker's simplest value (null: none).
struct Field {
    const char* name;
    std::variant<int S::*, bool S::*, std::string S::*, KvType S::*> member;
    int lo, hi;
    const char* before;
    const char* simplest;
    bool other_memories;  // the other archs' only: a llama server runs without it
};

// Three fields have no simpler value: the pooling (completions and
// embeddings are different ops), and the slots and the adapters, which a
// trace's ops name by index (fewer would leave its ops naming none).
// Traces before per-request LoRA, the RAM cache, draft models, context
// shift and the KV type ran their servers without them.
// The arch and its window are the model's (a trace's ops were drawn for
// it): no simpler value. Traces before the other archs ran llama at the
// server's checkpoint defaults.
constexpr std::array<Field, 17> kServerSettingsFields = {{
    {"slots", &S::slots, 1, 16, nullptr, nullptr, false},
    {"unified", &S::unified, 0, 0, nullptr, "false", false},
    {"cache_reuse", &S::cache_reuse, 0, 64, nullptr, "0", false},
    {"pooling", &S::pooling, 0, 0, nullptr, nullptr, false},
    {"ctx_extra", &S::ctx_extra, 0, 15, nullptr, "0", false},
    {"loras", &S::loras, 0, 8, "0", nullptr, false},
    {"cache_ram", &S::cache_ram, -1, 1 << 20, "0", "0", false},
    {"idle_slots", &S::idle_slots, 0, 0, "false", "false", false},
    {"draft", &S::draft, 0, 2, "0", "0", false},
    {"context_shift", &S::context_shift, 0, 0, "false", "false", false},
    {"kv_type", &S::kv_type, 0, 0, "\"f32\"", "\"f32\"", false},
    {"arch", &S::arch, 0, 0, "\"llama\"", nullptr, false},
    {"window", &S::window, 1, 64, "8", nullptr, true},
    {"swa_full", &S::swa_full, 0, 0, "false", "false", true},
    {"ctx_checkpoints", &S::ctx_checkpoints, 0, 64, "32", "0", true},
    {"checkpoint_min_step", &S::checkpoint_min_step, 0, 8192, "8192", "8192", true},
    {"ngram", &S::ngram, 0, 0, "false", "false", true},
}};

nlohmann::json field_json(const S& s, const Field& f) {
    return std::visit(Overloaded{[&](int S::*m) { return nlohmann::json(s.*m); },
                                 [&](bool S::*m) { return nlohmann::json(s.*m); },
                                 [&](std::string S::*m) { return nlohmann::json(s.*m); },
                                 [&](KvType S::*m) { return nlohmann::json(std::string(kv_type_name(s.*m))); }},
                      f.member);
}

// Sets `f` from `j`'s field (or its value before the field), checked.
void read_field(S& s, const Field& f, const nlohmann::json& j) {
    require(j.contains(f.name) || f.before, "settings: no field '", f.name, "'");
    nlohmann::json at = nlohmann::json::object();
    at[f.name] = j.contains(f.name) ? j.at(f.name) : nlohmann::json::parse(f.before);
    std::visit(Overloaded{[&](int S::*m) { s.*m = json_int_in(at, f.name, f.lo, f.hi); },
                          [&](bool S::*m) { s.*m = json_field<bool>(at, f.name); },
                          [&](std::string S::*m) { s.*m = json_field<std::string>(at, f.name); },
                          [&](KvType S::*m) { s.*m = parse_kv_type(json_field<std::string>(at, f.name), cat("field '", f.name, "' value")); }},
                      f.member);
}

// What no field's range says alone, or "": a context the slots do not
// divide by less than one slot's share; what the other archs run without.
std::string invalid(const S& s) {
    if (s.ctx_extra >= s.slots) return cat("field 'ctx_extra' = ", s.ctx_extra, ": must be below 'slots' (", s.slots, ")");
    if (!s.pooling.empty() && s.pooling != "mean" && s.pooling != "last")
        return cat("field 'pooling' = '", s.pooling, "': \"\", \"mean\" or \"last\"");
    const llamacpp::ArchModel* a = llamacpp::find_arch(s.arch);
    if (!a) return cat("field 'arch' = '", s.arch, "': must be one of ", arch_names());
    if (!s.llama() && s.embeddings())
        return cat("field 'pooling' = '", s.pooling, "': embeddings are judged by the reference, which knows llama only (arch '",
                   s.arch, "')");
    if (!s.llama() && s.draft) return cat("field 'draft' = ", s.draft, ": a draft model is llama's only (arch '", s.arch, "')");
    if (!s.llama() && s.loras)
        return cat("field 'loras' = ", s.loras, ": kvweld's adapters are llama's (arch '", s.arch, "')");
    if (!a->window && s.swa_full) return cat("field 'swa_full': arch '", s.arch, "' has no sliding window");
    if (s.ngram && s.draft) return cat("field 'ngram': ngram drafts or a draft model (draft ", s.draft, "), not both");
    return "";
}

void check(const S& s) {
    const std::string why = invalid(s);
    require(why.empty(), why);
}

// The architecture named by the settings (checked).
const llamacpp::ArchModel& arch_of(const S& s) {
    check(s);
    return arch_named(s.arch);
}

}  // namespace

std::string arch_names() {
    std::string out;
    for (const llamacpp::ArchModel& a : llamacpp::kArchModels) out += cat(out.empty() ? "" : ", ", a.name);
    return out;
}

const llamacpp::ArchModel& arch_named(const std::string& name) {
    const llamacpp::ArchModel* a = llamacpp::find_arch(name);
    require(a != nullptr, "arch '", name, "': must be one of ", arch_names());
    return *a;
}

namespace {

// The other memories' settings, on their own stream (a llama seed's draw
// is what it was). The server turns chunk reuse and context shift off
// where the memory cannot shift (server-context.cpp:1318-1328), which a
// sliding window can only where its cache is smaller than the full one:
// at these contexts (a slot's 128 tokens, below the window plus a 512-token
// ubatch) it is never, and both are drawn as for llama. No
// embeddings and no draft model: the reference, which judges embeddings,
// knows llama only, and a draft or an adapter would need one of its own arch.
void draw_memory(S& s, std::uint64_t seed) {
    Rng rng(seed ^ 0xa7c4ULL);
    const llamacpp::ArchModel& a = arch_named(s.arch);
    s.pooling.clear(), s.draft = 0, s.loras = 0;
    s.window = a.window ? std::array<int, 3>{4, 8, 16}[rng.below(3)] : 8;
    s.swa_full = a.window && rng.chance(0.3);
    s.ctx_checkpoints = std::array<int, 4>{0, 1, 3, 32}[rng.below(4)];
    s.checkpoint_min_step = std::array<int, 3>{0, 4, 8192}[rng.below(3)];
    s.ngram = rng.chance(0.3);
}

}  // namespace

ServerSettings ServerSettings::draw(std::uint64_t seed, const std::string& arch) {
    Rng rng(seed ^ 0x5e77165ULL);
    const int slots = int(rng.range(1, 4));  // n_cmpl up to the slots: up to 4 completions of one prompt
    const bool unified = rng.chance(0.5);
    const int cache_reuse = std::array<int, 3>{0, 2, 4}[rng.below(3)];
    std::string pooling;
    if (rng.chance(0.15)) pooling = rng.chance(0.5) ? "mean" : "last";
    const bool embeddings = !pooling.empty();
    const int ctx_extra = rng.chance(0.3) ? int(rng.below(std::uint64_t(slots))) : 0;
    const int loras = !embeddings && rng.chance(0.3) ? int(rng.range(1, 2)) : 0;
    // The server's default is a RAM cache of 8192 MiB with idle slots saved: half the seeds run it, or with no size limit.
    int cache_ram = 0;
    bool idle_slots = false;
    if (rng.chance(0.5)) cache_ram = rng.chance(0.5) ? 8192 : -1, idle_slots = rng.chance(0.6);
    // A draft model in one seed in ten: on b11434 every accepted draft token reports probability 1 (speculative-logprobs-unset).
    const int draft = !embeddings && rng.chance(0.1) ? int(rng.range(1, 2)) : 0;
    const bool context_shift = !embeddings && rng.chance(0.25);
    KvType kv_type = KvType::f32;
    if (rng.chance(0.3)) kv_type = rng.chance(0.5) ? KvType::f16 : KvType::bf16;
    ServerSettings s{.slots = slots, .unified = unified, .cache_reuse = cache_reuse, .pooling = pooling,
                     .ctx_extra = ctx_extra, .loras = loras, .cache_ram = cache_ram, .idle_slots = idle_slots,
                     .draft = draft, .context_shift = context_shift, .kv_type = kv_type, .arch = arch, .window = 8,
                     .swa_full = false, .ctx_checkpoints = 32, .checkpoint_min_step = 8192, .ngram = false};
    if (!s.llama()) draw_memory(s, seed);
    check(s);
    return s;
}

std::vector<std::string> ServerSettings::flags() const {
    const std::string kv(kv_type_name(kv_type));
    std::vector<std::string> out = {"-ctk", kv, "-ctv", kv, "-np", std::to_string(slots), unified ? "--kv-unified" : "--no-kv-unified",
                                    "--cache-reuse", std::to_string(cache_reuse), "--cache-ram", std::to_string(cache_ram),
                                    idle_slots ? "--cache-idle-slots" : "--no-cache-idle-slots"};
    if (context_shift) out.push_back("--context-shift");
    if (embeddings()) out.insert(out.end(), {"--embedding", "--pooling", pooling});
    if (!llama()) {
        out.insert(out.end(), {"--ctx-checkpoints", std::to_string(ctx_checkpoints), "--checkpoint-min-step",
                               std::to_string(checkpoint_min_step)});
        if (swa_full) out.push_back("--swa-full");
        if (ngram)
            out.insert(out.end(), {"--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", std::to_string(kNgramLookup),
                                   "--spec-ngram-simple-size-m", std::to_string(kDraftMax)});
    }
    return out;
}

bool is_drawn(const std::string& name, const std::string& arch) {
    const llamacpp::ArchModel& a = arch_named(arch);
    if (name == "arch") return false;
    if (name == "window" || name == "swa_full") return a.window;
    if (name == "pooling" || name == "draft" || name == "loras") return arch == "llama";
    for (const Field& f : kServerSettingsFields)
        if (name == f.name) return arch != "llama" || !f.other_memories;
    return false;
}

std::string ServerSettings::describe() const {
    std::string out;
    for (const std::string& f : flags()) out += cat(out.empty() ? "" : " ", f);
    if (loras) out += cat(", ", loras, " LoRA adapter", loras > 1 ? "s" : "");
    if (draft) out += draft == 1 ? ", a draft model of the same weights" : ", a draft model of other weights";
    if (ngram) out += ", ngram drafts";
    if (!llama()) out += cat(", arch ", arch, arch_of(*this).window ? cat(" (window ", window, ")") : "");
    return ctx_extra ? cat(out, ", -c ", slots, " contexts + ", ctx_extra) : out;
}

int ServerSettings::slot_ctx(int model_ctx) const {
    const int n = padded_n_ctx(ctx(model_ctx), slots, unified);
    return std::min(unified ? n : n / slots, model_ctx);
}

PromptCacheSettings ServerSettings::prompt_cache(int model_ctx) const {
    return {cache_ram, idle_slots && cache_ram != 0, unified, padded_n_ctx(ctx(model_ctx), slots, unified)};
}

nlohmann::json ServerSettings::to_json() const {
    nlohmann::json j = nlohmann::json::object();
    for (const Field& f : kServerSettingsFields) j[f.name] = field_json(*this, f);
    return j;
}

ServerSettings ServerSettings::from_json(const nlohmann::json& j) {
    require(j.is_object(), "settings: not an object");
    ServerSettings s{.slots = 0, .unified = false, .cache_reuse = 0, .pooling = "", .ctx_extra = 0, .loras = 0,
                     .cache_ram = 0, .idle_slots = false, .draft = 0, .context_shift = false, .kv_type = KvType::f32,
                     .arch = "", .window = 0, .swa_full = false, .ctx_checkpoints = 0, .checkpoint_min_step = 0, .ngram = false};
    for (const Field& f : kServerSettingsFields) read_field(s, f, j);
    check(s);
    return s;
}

std::vector<ServerSettings> ServerSettings::simpler() const {
    std::vector<ServerSettings> out;
    for (const Field& f : kServerSettingsFields) {
        if (!f.simplest) continue;
        ServerSettings c = *this;
        read_field(c, f, nlohmann::json{{f.name, nlohmann::json::parse(f.simplest)}});
        if (c != *this && invalid(c).empty() && (!llama() || !f.other_memories)) out.push_back(c);
    }
    return out;
}

namespace {

std::vector<std::string> fixed_args(const ServerFiles& files) {
    return {"-t", "1", "--no-warmup", "-fa", "off", "--slot-save-path", files.slot_dir, "--slots"};
}

void add_loras(std::vector<std::string>& args, const ServerSettings& s, const ServerFiles& files) {
    require(int(files.loras.size()) == s.loras, "server_args: ", files.loras.size(), " adapter files for ", s.loras, " adapters");
    for (const std::string& f : files.loras) args.insert(args.end(), {"--lora", f});
}

}  // namespace

std::vector<std::string> server_args(const ServerSettings& s, int model_ctx, const ServerFiles& files) {
    std::vector<std::string> args = {"-c", std::to_string(s.ctx(model_ctx))};
    for (const std::string& f : fixed_args(files)) args.push_back(f);
    for (const std::string& f : s.flags()) args.push_back(f);
    add_loras(args, s, files);
    if (s.draft) {
        require(!files.draft.empty(), "server_args: a draft model (", s.draft, ") without its file");
        args.insert(args.end(), {"-md", files.draft, "--spec-type", "draft-simple", "--spec-draft-n-max", std::to_string(kDraftMax)});
    }
    return args;
}

std::vector<std::string> ground_truth_args(const ServerSettings& s, int model_ctx, const ServerFiles& files) {
    const std::string kv(kv_type_name(s.kv_type));
    std::vector<std::string> args = {"-c", std::to_string(model_ctx), "-np", "1", "--cache-reuse", "0", "--cache-ram", "0",
                                     "-ctk", kv, "-ctv", kv};
    if (s.context_shift) args.push_back("--context-shift");
    add_loras(args, s, files);
    for (const std::string& f : fixed_args(files)) args.push_back(f);
    return args;
}

}  // namespace kvweld::sim::server
