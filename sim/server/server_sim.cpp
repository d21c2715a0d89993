// The server simulator (sim/server/server_sim.hpp): settings, the server
// started and driven, every answer told to the oracles, the verdict.
#include "sim/server/server_sim.hpp"

#include "engine/gguf.hpp"
#include "sim/json_field.hpp"
#include "sim/server/server_oracles.hpp"
#include "targets/llamaserver/http.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kvweld::sim::server {

namespace {

using targets::llamaserver::ServerSetup;

// The flags every seed's server gets: flash attention off (the
// reference's numbers), slot files, the slots endpoint (to wait out a
// cancelled request), one thread.
std::vector<std::string> fixed_flags(const std::string& work_dir) {
    return {"-t", "1", "--no-warmup", "-fa", "off", "--slot-save-path", work_dir + "/slots/", "--slots"};
}

constexpr std::array<std::pair<KvType, const char*>, 3> kKvTypes = {
    {{KvType::f32, "f32"}, {KvType::f16, "f16"}, {KvType::bf16, "bf16"}}};

const char* kv_type_name(KvType t) {
    for (const auto& [type, name] : kKvTypes)
        if (type == t) return name;
    return "?";
}

// Until no slot is processing (a cancelled stream's task ends after the
// client has gone); then GET /slots' answer. An Error after the limit.
nlohmann::json await_idle(int port, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(long(timeout_s * 1000));
    while (true) {
        const auto got = targets::llamaserver::http_request(port, "GET", "/slots", "", timeout_s);
        require(got.status == 200, "GET /slots: status ", got.status, ": ", got.body.substr(0, 200));
        const nlohmann::json j = nlohmann::json::parse(got.body, nullptr, false);
        require(j.is_array(), "GET /slots: not an array: '", got.body.substr(0, 200), "'");
        bool busy = false;
        for (const nlohmann::json& s : j) busy |= s.value("is_processing", false);
        if (!busy) return j;
        require(std::chrono::steady_clock::now() < deadline, "a slot still processing ", timeout_s,
                " s after its client closed the stream");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

// The run's adapters written beside the model, and the flags that load them
// at the server's default scale, 1 (not --lora-init-without-apply: b11434
// leaves its scales at 1 all the same, against its README; llama.cpp issue
// 28674, reported upstream).
std::vector<std::string> write_loras(const Model& model, const ServerRunConfig& c) {
    std::vector<std::string> flags;
    const auto loras = server_loras(model.config(), c.seed, c.settings.loras);
    for (std::size_t i = 0; i < loras.size(); ++i) {
        const std::string path = cat(c.work_dir, "/lora-", i, ".gguf");
        const std::vector<std::byte> bytes = serialize_gguf_lora(*loras[i]);
        std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
        flags.insert(flags.end(), {"--lora", path});
    }
    return flags;
}

}  // namespace

std::string_view to_string(ServerVerdict v) {
    switch (v) {
        case ServerVerdict::pass: return "PASS";
        case ServerVerdict::fail: return "FAIL";
        case ServerVerdict::server_error: return "SERVER_ERROR";
    }
    return "?";
}

// ---- settings

ServerSettings ServerSettings::draw(std::uint64_t seed) {
    Rng rng(seed ^ 0x5e77165ULL);
    ServerSettings s;
    s.slots = int(rng.range(1, 3));
    s.unified = rng.chance(0.5);
    s.cache_reuse = std::array<int, 3>{0, 2, 4}[rng.below(3)];
    if (rng.chance(0.15)) s.pooling = rng.chance(0.5) ? "mean" : "last";
    s.ctx_extra = rng.chance(0.3) ? int(rng.below(std::uint64_t(s.slots))) : 0;
    s.loras = !s.embeddings() && rng.chance(0.3) ? int(rng.range(1, 2)) : 0;
    // The server's default is a RAM cache of 8192 MiB with idle slots saved: half the seeds run it, or with no size limit.
    if (rng.chance(0.5)) s.cache_ram = rng.chance(0.5) ? 8192 : -1, s.idle_slots = rng.chance(0.6);
    // A draft model in one seed in ten: on b11434 every accepted draft token reports probability 1 (speculative-logprobs-unset).
    if (!s.embeddings() && rng.chance(0.1)) s.draft = int(rng.range(1, 2));
    s.context_shift = !s.embeddings() && rng.chance(0.25);
    if (rng.chance(0.3)) s.kv_type = rng.chance(0.5) ? KvType::f16 : KvType::bf16;
    return s;
}

std::vector<std::string> ServerSettings::flags() const {
    std::vector<std::string> out = {"-ctk", kv_type_name(kv_type), "-ctv", kv_type_name(kv_type), "-np", std::to_string(slots), unified ? "--kv-unified" : "--no-kv-unified", "--cache-reuse",
                                    std::to_string(cache_reuse), "--cache-ram", std::to_string(cache_ram),
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
    return {{"slots", slots},         {"unified", unified}, {"cache_reuse", cache_reuse}, {"pooling", pooling},
            {"ctx_extra", ctx_extra}, {"loras", loras},     {"cache_ram", cache_ram},     {"idle_slots", idle_slots},
            {"draft", draft}, {"context_shift", context_shift}, {"kv_type", kv_type_name(kv_type)}};
}

ServerSettings ServerSettings::from_json(const nlohmann::json& j) {
    ServerSettings s;
    s.slots = json_int_in(j, "slots", 1, 16);
    s.unified = json_field<bool>(j, "unified");
    s.cache_reuse = json_int_in(j, "cache_reuse", 0, 64);
    s.pooling = json_field<std::string>(j, "pooling");
    s.ctx_extra = json_int_in(j, "ctx_extra", 0, s.slots - 1);
    // Traces before per-request LoRA have no field: their servers loaded no adapters.
    s.loras = j.contains("loras") ? json_int_in(j, "loras", 0, 8) : 0;
    // Traces before the RAM cache have neither: their servers ran with --cache-ram 0.
    s.cache_ram = j.contains("cache_ram") ? json_int_in(j, "cache_ram", -1, 1 << 20) : 0;
    s.idle_slots = j.contains("idle_slots") && json_field<bool>(j, "idle_slots");
    s.draft = j.contains("draft") ? json_int_in(j, "draft", 0, 2) : 0;  // traces before draft models: none
    s.context_shift = j.contains("context_shift") && json_field<bool>(j, "context_shift");
    const std::string kv = j.contains("kv_type") ? json_field<std::string>(j, "kv_type") : "f32";  // traces before: F32 KV
    const auto it = std::find_if(kKvTypes.begin(), kKvTypes.end(), [&](const auto& t) { return kv == t.second; });
    require(it != kKvTypes.end(), "field 'kv_type' = '", kv, "': f32, f16 or bf16");
    s.kv_type = it->first;
    require(s.pooling.empty() || s.pooling == "mean" || s.pooling == "last", "field 'pooling' = '", s.pooling,
            "': \"\", \"mean\" or \"last\"");
    return s;
}

// ---- the simulator

ServerSim::ServerSim(const ServerRunConfig& c) : config_(c), model_(Model::random(config_by_name(c.preset), c.seed)) {
    // A run starts with no slot file: a replay or a shrinker's run in the same folder must not restore an earlier run's.
    std::filesystem::remove_all(c.work_dir + "/slots");
    std::filesystem::remove_all(c.work_dir + "/truth/slots");
    std::filesystem::create_directories(c.work_dir + "/slots");
    const std::string gguf = c.work_dir + "/model.gguf";
    save_gguf(model_, gguf, Vocab::test);
    const int n_ctx = model_.config().max_seq_len;
    std::vector<std::string> args = {"-c", std::to_string(c.settings.ctx(n_ctx))};
    for (const std::string& f : fixed_flags(c.work_dir)) args.push_back(f);
    for (const std::string& f : c.settings.flags()) args.push_back(f);
    const std::vector<std::string> lora_flags = write_loras(model_, c);
    args.insert(args.end(), lora_flags.begin(), lora_flags.end());
    if (c.settings.draft) {
        const std::string draft = c.work_dir + "/draft.gguf";
        save_gguf(Model::random(model_.config(), draft_seed(c.seed, c.settings.draft)), draft, Vocab::test);
        args.insert(args.end(), {"-md", draft, "--spec-type", "draft-simple", "--spec-draft-n-max", std::to_string(kDraftMax)});
    }
    process_ = std::make_unique<targets::llamaserver::ServerProcess>(ServerSetup{c.server, gguf, args, log_path(), c.request_timeout_s});
    const ServerSettings& s = c.settings;
    if (s.embeddings()) {
        oracles_.push_back(std::make_unique<EmbeddingOracle>(model_, s.pooling, s.kv_type, kv_tolerance(s.kv_type)));
        return;
    }
    const auto loras = server_loras(model_.config(), c.seed, s.loras);
    const PromptCacheSettings ram = s.prompt_cache(n_ctx);
    const int shift = s.shift_ctx(n_ctx);
    oracles_.push_back(std::make_unique<LogprobOracle>(model_, s.slots, s.cache_reuse, loras, ram, shift, s.kv_type,
                                                       kv_tolerance(s.kv_type)));
    oracles_.push_back(std::make_unique<SlotCacheModel>(s.slots, s.cache_reuse, s.loras, ram, shift));
    if (c.lockstep) {
        // The same slot context (the model's), and the same context shifts on a fresh prompt.
        std::vector<std::string> truth = {"-c", std::to_string(n_ctx), "-np", "1", "--cache-reuse", "0", "--cache-ram", "0",
                                          "-ctk", kv_type_name(s.kv_type), "-ctv", kv_type_name(s.kv_type)};
        if (s.context_shift) truth.push_back("--context-shift");
        truth.insert(truth.end(), lora_flags.begin(), lora_flags.end());
        for (const std::string& f : fixed_flags(c.work_dir + "/truth")) truth.push_back(f);
        std::filesystem::create_directories(c.work_dir + "/truth/slots");
        oracles_.push_back(std::make_unique<GroundTruth>(ServerSetup{c.server, gguf, truth, c.work_dir + "/truth.log", c.request_timeout_s},
                                                         s.slots, s.cache_reuse, s.loras, ram, shift, c.request_timeout_s,
                                                         kv_tolerance(s.kv_type)));
    }
}

ServerSim::~ServerSim() = default;

std::string ServerSim::log_path() const { return config_.work_dir + "/llama-server.log"; }

void ServerSim::add_oracle(std::unique_ptr<ServerOracle> oracle) { oracles_.push_back(std::move(oracle)); }

void ServerSim::end() {
    if (process_) process_->stop();
    oracles_.clear();  // the ground truth's server stops with it
}

ServerVerdict ServerSim::verdict() const {
    return !failure_ ? ServerVerdict::pass : server_error_ ? ServerVerdict::server_error : ServerVerdict::fail;
}

ServerTally ServerSim::tally() const {
    ServerTally t;
    t.ops = ops_run_;
    for (const auto& o : oracles_) o->tally(t);
    return t;
}


void ServerSim::fail(std::size_t index, const std::string& oracle, const std::string& message) {
    if (!failure_) failure_ = ServerFailure{index, oracle, message};
}

bool ServerSim::apply(const ServerOp& op, std::size_t index, nlohmann::json& observed) {
    ++ops_run_[std::size_t(op.kind())];
    try {
        std::visit([&](const auto& a) { run(a, index, observed); }, op.args);
    } catch (const Error& e) {
        // A failed exchange, an answer that is not one, a server that died or hung.
        const bool alive = process_->running();
        fail(index, "server", cat(e.what(), "; llama-server ", alive ? "still runs" : "has ended", "; its log's last lines (",
                                  log_path(), "):\n", process_->log_tail(8)));
        server_error_ = true;
        return false;
    }
    return !failure_;
}

std::vector<ServerAnswer> ServerSim::send(const Completion& c, const std::string& what) {
    require(c.lora.empty() || int(c.lora.size()) == config_.settings.loras, what, ": ", c.lora.size(), " LoRA scales, the server has ",
            config_.settings.loras, " adapters");
    // A cancelled stream: the connection is closed once cancel_after tokens have come.
    std::function<bool(const std::string&)> stop;
    if (c.cancel_after > 0)
        stop = [n = c.cancel_after](const std::string& raw) {
            int events = 0;
            for (std::size_t at = 0; (at = raw.find("\"completion_probabilities\"", at)) != std::string::npos; ++at) ++events;
            return events >= n;
        };
    const auto got = targets::llamaserver::http_request(process_->port(), "POST", "/completion", completion_body(c).dump(),
                                                        config_.request_timeout_s, stop);
    require(got.status == 200, what, ": status ", got.status, ": ", got.body.substr(0, 300));
    std::vector<ServerAnswer> answers = parse_completion(got.body, c.stream);
    require(int(answers.size()) == c.n_cmpl, what, ": ", answers.size(), " completions, ", c.n_cmpl, " asked");
    if (c.cancel_after > 0) {
        // Only the tokens of the events counted: a later one in the same read came after the client had stopped.
        // A stream's events name no slot ("id_slot": -1; the final one names
        // it): a cut one was served by the slot it was pinned to.
        for (ServerAnswer& a : answers) {
            if (int(a.tokens.size()) > c.cancel_after) a.tokens.resize(std::size_t(c.cancel_after)), a.top.resize(a.tokens.size()),
                    a.chosen.resize(a.tokens.size()), a.cut = true;
            if (a.cut) a.slot = c.slot;
        }
        // What the cut slot holds: the RAM cache's choices depend on it. (Not
        // its prompt's cache_n: the slot's statistics are reset when the
        // cancelled task is released, server-context.cpp:404.)
        const nlohmann::json slots = await_idle(process_->port(), config_.request_timeout_s);
        for (ServerAnswer& a : answers)
            for (const nlohmann::json& s : slots)
                if (a.cut && s.value("id", -1) == a.slot) a.held = s.value("n_prompt_tokens", -1);
    }
    for (const ServerAnswer& a : answers)
        require(a.slot >= 0 && a.slot < config_.settings.slots, what, ": served by slot ", a.slot, ", the server has ",
                config_.settings.slots);
    return answers;
}

void ServerSim::judge_completion(const Completion& c, const std::vector<ServerAnswer>& answers, std::size_t index) {
    for (const ServerAnswer& a : answers)
        if (c.slot >= 0 && a.index == 0 && a.slot != c.slot)
            fail(index, "slots", cat("served by slot ", a.slot, ", not slot ", c.slot, " the request named"));
    for (const auto& o : oracles_) {
        const std::string why = o->on_completion(c, answers);
        if (!why.empty()) fail(index, o->name(), why);
    }
}

}  // namespace kvweld::sim::server
