// The server simulator (sim/server/server_sim.hpp): the server
// started and driven, every answer told to the oracles, the verdict.
#include "sim/server/server_sim.hpp"

#include "engine/gguf.hpp"
#include "sim/json_field.hpp"
#include "sim/server/server_oracles.hpp"
#include "sim/server/server_variants.hpp"
#include "sim/server/server_wire.hpp"
#include "targets/llamaserver/http.hpp"
#include "targets/registry.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <thread>

namespace kvweld::sim::server {

namespace {

using targets::llamaserver::ServerSetup;

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

// The run's adapters written beside the model, loaded at the server's
// default scale, 1 (not --lora-init-without-apply: b11434 leaves its scales
// at 1 all the same, against its README; llama.cpp issue 28674, reported
// upstream). Their paths.
std::vector<std::string> write_loras(const Model& model, const ServerRunConfig& c) {
    std::vector<std::string> paths;
    const auto loras = server_loras(model.config(), c.seed, c.settings.loras);
    for (std::size_t i = 0; i < loras.size(); ++i) {
        paths.push_back(cat(c.work_dir, "/lora-", i, ".gguf"));
        const std::vector<std::byte> bytes = serialize_gguf_lora(*loras[i]);
        std::ofstream(paths.back(), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
    return paths;
}

}  // namespace

void write_server_model(const Model& model, const std::string& arch, int window, std::uint64_t seed, const std::string& path,
                        double timeout_s) {
    if (arch == "llama") return save_gguf(model, path, Vocab::test);
    const std::string writer = targets::arch_model_writer("llama-server");
    const std::string shape = path + ".shape.gguf";
    save_gguf(model, shape, Vocab::test);
    targets::llamaserver::run_to_end({writer, arch, std::to_string(window), std::to_string(std::uint32_t(seed)), shape, path},
                                     path + ".log", timeout_s);
    std::filesystem::remove(shape);
    std::filesystem::remove(path + ".log");
}

std::string_view to_string(ServerVerdict v) {
    switch (v) {
        case ServerVerdict::pass: return "PASS";
        case ServerVerdict::fail: return "FAIL";
        case ServerVerdict::server_error: return "SERVER_ERROR";
    }
    return "?";
}

// ---- the simulator

ServerSim::ServerSim(const ServerRunConfig& c)
    : config_(c), model_(Model::random(config_by_name(c.preset), c.seed)), variants_sent_(kServerOpVariantCount, 0) {
    // A run starts with no slot file: a replay or a shrinker's run in the same folder must not restore an earlier run's.
    std::filesystem::remove_all(c.work_dir + "/slots");
    std::filesystem::remove_all(c.work_dir + "/truth/slots");
    std::filesystem::create_directories(c.work_dir + "/slots");
    const std::string gguf = c.work_dir + "/model.gguf";
    write_server_model(model_, c.settings.arch, c.settings.window, c.seed, gguf, c.request_timeout_s);
    const int n_ctx = model_.config().max_seq_len;
    ServerFiles files{c.work_dir + "/slots/", write_loras(model_, c), ""};
    if (c.settings.draft) {
        files.draft = c.work_dir + "/draft.gguf";
        save_gguf(Model::random(model_.config(), draft_seed(c.seed, c.settings.draft)), files.draft, Vocab::test);
    }
    const std::vector<std::string> args = server_args(c.settings, n_ctx, files);
    process_ = std::make_unique<targets::llamaserver::ServerProcess>(ServerSetup{c.server, gguf, args, log_path(), c.request_timeout_s});
    // The oracles, each with why a run has none of it: one table.
    const ServerSettings& s = c.settings;
    struct Row {
        const char* name;
        const char* why_not;  // where `runs` is false
        bool runs;
        std::function<std::unique_ptr<ServerOracle>()> make;
    };
    const Row rows[] = {
        {"logprobs", s.embeddings() ? "an embedding server (--pooling) generates no tokens"
                                    : "the reference forward knows llama only: the ground truth judges the other archs",
         !s.embeddings() && s.llama(),
         [&] { return std::make_unique<LogprobOracle>(s, model_, server_loras(model_.config(), c.seed, s.loras)); }},
        {"reuse", "an embedding server (--pooling) keeps no prompt to reuse", !s.embeddings(),
         [&] { return std::make_unique<SlotCacheModel>(s, n_ctx); }},
        {"ground-truth", s.embeddings() ? "an embedding server (--pooling): the reference judges each embedding"
                                        : "no lockstep server (the reuse study runs without one)",
         !s.embeddings() && c.lockstep,
         [&] {
             // The same slot context (the model's), and the same context shifts on a fresh prompt.
             ServerFiles truth_files = files;
             truth_files.slot_dir = c.work_dir + "/truth/slots/", truth_files.draft = "";
             const std::vector<std::string> truth = ground_truth_args(s, n_ctx, truth_files);
             std::filesystem::create_directories(c.work_dir + "/truth/slots");
             return std::make_unique<GroundTruth>(ServerSetup{c.server, gguf, truth, c.work_dir + "/truth.log", c.request_timeout_s},
                                                  s, n_ctx, model_.config().vocab, c.request_timeout_s);
         }},
        {"embeddings", "a completion server has no pooled output", s.embeddings(),
         [&] { return std::make_unique<EmbeddingOracle>(s, model_); }},
    };
    for (const Row& row : rows) {
        if (row.runs) oracles_.push_back(row.make()), ++chosen_.ran[row.name];
        else ++chosen_.not_run[row.name][row.why_not];
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
    ServerTally t = chosen_;
    t.ops = ops_run_;
    for (std::size_t v = 0; v < kServerOpVariantCount; ++v) t.variants[std::string(kServerOpVariants[v].name)] = variants_sent_[v];
    for (const auto& o : oracles_) o->tally(t);
    return t;
}


void ServerSim::fail(std::size_t index, const std::string& oracle, const std::string& message) {
    if (!failure_) failure_ = ServerFailure{index, oracle, message};
}

bool ServerSim::apply(const ServerOp& op, std::size_t index, nlohmann::json& observed) {
    ++ops_run_[std::size_t(op.kind())];
    for (std::size_t v = 0; v < kServerOpVariantCount; ++v) variants_sent_[v] += kServerOpVariants[v].in(op);
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

std::vector<ServerAnswer> ServerSim::send(const Completion& c, const std::string& what,
                                          const std::function<void(const std::string&)>& watch) {
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
    if (watch) stop = [&watch](const std::string& raw) { return watch(raw), false; };
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
    for (const auto& o : oracles_) {
        const std::string why = o->on_completion(c, answers);
        if (!why.empty()) fail(index, o->name(), why);
    }
}

}  // namespace kvweld::sim::server
