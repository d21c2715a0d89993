// A server run's settings (server_settings.hpp): drawn per seed,
// their flags, and the one description of their fields that JSON and the
// shrinker read.
#include "sim/server/server_settings.hpp"

#include "sim/json_field.hpp"
#include "sim/server/server_exchange.hpp"
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
};

// Three fields have no simpler value: the pooling (completions and
// embeddings are different ops), and the slots and the adapters, which a
// trace's ops name by index (fewer would leave its ops naming none).
// Traces before per-request LoRA, the RAM cache, draft models, context
// shift and the KV type ran their servers without them.
constexpr std::array<Field, 11> kServerSettingsFields = {{
    {"slots", &S::slots, 1, 16, nullptr, nullptr},
    {"unified", &S::unified, 0, 0, nullptr, "false"},
    {"cache_reuse", &S::cache_reuse, 0, 64, nullptr, "0"},
    {"pooling", &S::pooling, 0, 0, nullptr, nullptr},
    {"ctx_extra", &S::ctx_extra, 0, 15, nullptr, "0"},
    {"loras", &S::loras, 0, 8, "0", nullptr},
    {"cache_ram", &S::cache_ram, -1, 1 << 20, "0", "0"},
    {"idle_slots", &S::idle_slots, 0, 0, "false", "false"},
    {"draft", &S::draft, 0, 2, "0", "0"},
    {"context_shift", &S::context_shift, 0, 0, "false", "false"},
    {"kv_type", &S::kv_type, 0, 0, "\"f32\"", "\"f32\""},
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

// What no field's range says alone: a context the slots do not divide by
// less than one slot's share.
bool fits(const S& s) { return s.ctx_extra < s.slots; }

void check(const S& s) {
    require(fits(s), "field 'ctx_extra' = ", s.ctx_extra, ": must be below 'slots' (", s.slots, ")");
    require(s.pooling.empty() || s.pooling == "mean" || s.pooling == "last", "field 'pooling' = '", s.pooling,
            "': \"\", \"mean\" or \"last\"");
}

}  // namespace

ServerSettings ServerSettings::draw(std::uint64_t seed) {
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
    return {.slots = slots, .unified = unified, .cache_reuse = cache_reuse, .pooling = pooling, .ctx_extra = ctx_extra,
            .loras = loras, .cache_ram = cache_ram, .idle_slots = idle_slots, .draft = draft,
            .context_shift = context_shift, .kv_type = kv_type};
}

std::vector<std::string> ServerSettings::flags() const {
    const std::string kv(kv_type_name(kv_type));
    std::vector<std::string> out = {"-ctk", kv, "-ctv", kv, "-np", std::to_string(slots), unified ? "--kv-unified" : "--no-kv-unified",
                                    "--cache-reuse", std::to_string(cache_reuse), "--cache-ram", std::to_string(cache_ram),
                                    idle_slots ? "--cache-idle-slots" : "--no-cache-idle-slots"};
    if (context_shift) out.push_back("--context-shift");
    if (embeddings()) out.insert(out.end(), {"--embedding", "--pooling", pooling});
    return out;
}

std::string ServerSettings::describe() const {
    std::string out;
    for (const std::string& f : flags()) out += cat(out.empty() ? "" : " ", f);
    if (loras) out += cat(", ", loras, " LoRA adapter", loras > 1 ? "s" : "");
    if (draft) out += draft == 1 ? ", a draft model of the same weights" : ", a draft model of other weights";
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
                     .cache_ram = 0, .idle_slots = false, .draft = 0, .context_shift = false, .kv_type = KvType::f32};
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
        if (c != *this && fits(c)) out.push_back(c);
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
