// Known findings of a llama-server release (sim/server/server_known.hpp).
#include "sim/server/server_known.hpp"

#include "sim/server/server_oracles.hpp"
#include "sim/server/slot_states.hpp"

#include "sim/json_field.hpp"
#include "util/cat.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kvweld::sim::server {

namespace {

// The ops a run made up to its failing one.
std::vector<ServerOp> up_to_failure(const ServerRunResult& r) {
    const std::size_t n = r.failure ? std::min(r.ops.size(), r.failure->op + 1) : r.ops.size();
    return {r.ops.begin(), r.ops.begin() + std::ptrdiff_t(n)};
}

// pooled-split: mean pooling, one KV stream per slot, and the failing
// request embeds inputs of unequal lengths (one decode call, split).
bool unequal_inputs_in_one_request(const ServerRunResult& r) {
    if (r.config.settings.unified || r.config.settings.pooling != "mean" || r.ops.empty() || !r.failure) return false;
    const auto* e = std::get_if<Embed>(&r.ops.at(r.failure->op).args);
    if (!e) return false;
    return std::any_of(e->inputs.begin(), e->inputs.end(), [&](const auto& in) { return in.size() != e->inputs[0].size(); });
}

// pooled-mean-reserve-abort: mean pooling and a context the slots do not
// divide; the server ends while it starts.
bool context_not_divided_by_slots(const ServerRunResult& r) {
    return r.config.settings.pooling == "mean" && r.config.settings.ctx_extra > 0 && r.failure && r.failure->op == 0;
}

// The slots and the host-RAM prompt cache up to the failing request,
// walked with the oracles' slot model (slot_states.hpp), each slot state
// with the LoRA scales its KV was computed with, and each slot's adapters
// (llama-server's slot.lora: its last request's scales). At the failing
// request: what its slot holds once the server took it, and whether a
// request before it or it was pinned to an empty slot with a RAM cache on
// (from there on the server's cache holds what the reuse model moved:
// pinned-empty-slot-skips-cache), the cache holding a prompt the model
// loads there.
struct AtFailingRequest {
    bool loaded = false;             // its slot took a prompt from the RAM cache
    bool names_no_lora = false;      // it has no "lora": the server's scales
    bool mislabelled = false;        // its slot's state came from a file restored over other adapters (WalkState)
    std::vector<float> kv_scales;    // its slot's KV's scales, once taken (empty KV: none)
    std::vector<float> adapters;     // its slot's adapters then
    std::vector<float> server;       // the server's own scales then
};
struct WalkAtFailure {
    bool pinned_empty_so_far = false;
    std::vector<AtFailingRequest> requests;  // each request of the failing op (a burst's several)
};

// A slot state as the walk follows it. mislabelled: restored from a file
// whose KV was computed with other scales than the adapters of the slot it
// went into, with no request computed on it since. The server then takes
// the slot's adapters for the KV's (slot-restore-ignores-lora), and so does
// a RAM-cache entry the state goes into (labelled with those adapters, once
// ram-cache-ignores-lora is fixed): the state keeps the mark wherever it moves.
struct WalkState {
    std::vector<int> tokens;
    std::vector<float> scales;  // its KV's
    bool mislabelled = false;
    void clear() { *this = {}; }
};

WalkAtFailure walk_to_failure(const ServerRunResult& r) {
    const ServerSettings& s = r.config.settings;
    WalkAtFailure out;
    if (!r.failure) return out;
    const int model_ctx = config_by_name(r.config.preset).max_seq_len;
    SlotStates<WalkState> states(s, model_ctx, WalkState{});
    const std::vector<ServerOp> ops = up_to_failure(r);
    for (std::size_t i = 0; i < ops.size(); ++i) {
        if (const auto* a = std::get_if<Slot>(&ops[i].args)) {
            const WalkState* file = states.file(a->file);
            const bool mislabelled = a->action == SlotAction::restore && file && !file->tokens.empty() &&
                                     file->scales != states.adapters(a->slot);
            states.act(*a);
            if (a->action == SlotAction::restore) states.slot(a->slot).mislabelled = mislabelled;
        }
        for (const Answered& a : answered(ops[i], i < r.observed.size() ? r.observed[i] : nlohmann::json())) {
            if (a.answers.empty()) continue;
            const std::vector<int> before = states.slot(parent_first(a.answers).front()->slot).tokens;
            // Pinned to an empty slot where the cache holds a prompt the model would load: b11434 leaves it there.
            if (s.cache_ram != 0 && a.request.slot >= 0 && before.empty()) {
                PromptCacheModel<WalkState> probe = states.ram();
                out.pinned_empty_so_far |= probe.load({}, a.request.prompt).has_value();
            }
            states.complete(a.request, a.answers, [&](WalkState& now, const WalkState&, const ServerAnswer& x) {
                if (i == r.failure->op && x.index == 0)
                    out.requests.push_back({now.tokens != before && !now.tokens.empty(), a.request.lora.empty(), now.mislabelled,
                                            now.tokens.empty() ? std::vector<float>{} : now.scales, states.adapters(x.slot),
                                            states.server_scales()});
                now = {held_after(a.request, x, s.shift_ctx(model_ctx)), states.scales(a.request), false};
                return "";
            });
        }
        if (const std::optional<Lora> l = scales_set(ops[i])) states.lora(*l);
    }
    return out;
}

// state-io-under-queued-copy: one KV stream per slot; a request with
// several completions (the server copies the prompt's sequence to the
// copies' slots, a copy between streams that llama.cpp queues for the next
// decode: server-context.cpp:768-772), then a slot's state saved or
// restored with nothing decoded in between: by a slot action, or by the
// RAM prompt cache when the next request takes a cached prompt
// (prompt_save and prompt_load, server-context.cpp:1780-1782; seed 220).
bool copy_then_slot_state(const ServerRunResult& r) {
    if (r.config.settings.unified) return false;
    const std::vector<ServerOp> ops = up_to_failure(r);
    bool copy_queued = false;
    for (const ServerOp& op : ops) {
        const auto* c = std::get_if<Complete>(&op.args);
        const auto* s = std::get_if<Slot>(&op.args);
        if (s && copy_queued && s->action != SlotAction::erase) return true;
        if (!s) copy_queued = c && c->request.n_cmpl > 1;
    }
    const auto* before = ops.size() >= 2 ? std::get_if<Complete>(&ops[ops.size() - 2].args) : nullptr;
    if (r.config.settings.cache_ram == 0 || !before || before->request.n_cmpl <= 1) return false;
    const WalkAtFailure w = walk_to_failure(r);
    return std::any_of(w.requests.begin(), w.requests.end(), [](const AtFailingRequest& q) { return q.loaded; });
}

// slot-restore-ignores-lora: the failing request's slot holds a state
// restored from a file computed with other LoRA scales than the adapters
// of the slot it went into, with no request computed on it since: in that
// slot, or in another one that took it back from the RAM cache.
bool restore_over_other_scales(const ServerRunResult& r) {
    if (r.config.settings.loras == 0) return false;
    const WalkAtFailure w = walk_to_failure(r);
    return std::any_of(w.requests.begin(), w.requests.end(), [](const AtFailingRequest& q) { return q.mislabelled; });
}

// lora-default-keeps-cache: the failing request names no LoRA adapters
// (the server's own scales) and its slot holds KV computed with other
// scales (a request's own, or the server's before a POST /lora-adapters;
// its own or loaded from the RAM cache).
bool server_scales_over_other_scales(const ServerRunResult& r) {
    if (r.config.settings.loras == 0) return false;
    const WalkAtFailure w = walk_to_failure(r);
    return std::any_of(w.requests.begin(), w.requests.end(), [](const AtFailingRequest& q) {
        return q.names_no_lora && !q.kv_scales.empty() && q.kv_scales != q.server;
    });
}

// ram-cache-ignores-lora: LoRA adapters, a RAM prompt cache, and the
// failing request's slot took a cached prompt computed with other scales
// than the slot's adapters.
bool ram_load_over_other_scales(const ServerRunResult& r) {
    if (r.config.settings.loras == 0 || r.config.settings.cache_ram == 0) return false;
    const WalkAtFailure w = walk_to_failure(r);
    return std::any_of(w.requests.begin(), w.requests.end(),
                       [](const AtFailingRequest& q) { return q.loaded && q.kv_scales != q.adapters; });
}

// pinned-empty-slot-skips-cache: a RAM prompt cache, and the failing
// request or one before it pinned to a slot that held nothing while the
// cache held a prompt the reuse model loads there.
bool pinned_to_an_empty_slot(const ServerRunResult& r) { return walk_to_failure(r).pinned_empty_so_far; }

// speculative-logprobs-unset: a draft model, and the failing token's
// logprob is reported as exactly 0 (probability 1: what the server gives
// every token a verification batch accepted).
bool drafted_token_at_probability_one(const ServerRunResult& r) {
    return r.config.settings.draft > 0 && r.failure && r.failure->message.find(" logprob 0, reference") != std::string::npos;
}

// bf16-kshift-abort: bf16 K rows, a KV shift drawn (chunk reuse or
// context shift), and the server aborted where ggml's CPU RoPE has no bf16
// case (b11434's ggml/src/ggml-cpu/ops.cpp:6485, which ggml_abort prints
// whether or not a backtrace follows).
bool aborted_rotating_bf16_keys(const ServerRunResult& r) {
    const ServerSettings& s = r.config.settings;
    if (s.kv_type != KvType::bf16 || (s.cache_reuse == 0 && !s.context_shift) || r.verdict != ServerVerdict::server_error)
        return false;
    std::ifstream in(r.log);
    std::stringstream text;
    text << in.rdbuf();
    return text.str().find("ggml-cpu/ops.cpp:6485: fatal error") != std::string::npos;
}

// kshift-all-window-aborts: a model whose attention layers all slide
// (lfm2_swa: llama_kv_cache_iswa's full-attention cache holds no layer), a
// KV shift drawn (chunk reuse or context shift), and the server aborted
// where llama_kv_cache::set_input_k_shift gets a k_shift input with no
// buffer (GGML_ASSERT(buffer), ggml/src/ggml-backend.cpp:345, which
// ggml_abort prints whether or not a backtrace follows).
bool aborted_shifting_all_window_keys(const ServerRunResult& r) {
    const ServerSettings& s = r.config.settings;
    if (s.arch != "lfm2_swa" || (s.cache_reuse == 0 && !s.context_shift) || r.verdict != ServerVerdict::server_error)
        return false;
    std::ifstream in(r.log);
    std::stringstream text;
    text << in.rdbuf();
    return text.str().find("ggml-backend.cpp:345: GGML_ASSERT(buffer) failed") != std::string::npos;
}

// The failing request reused part of its slot (cache_n above 0).
bool failing_request_reused(const ServerRunResult& r) {
    const std::vector<ServerOp> ops = up_to_failure(r);
    if (ops.empty() || !r.failure || r.failure->op >= r.observed.size()) return false;
    for (const Answered& q : answered(ops.back(), r.observed[r.failure->op]))
        for (const ServerAnswer& x : q.answers)
            if (x.cache_n > 0) return true;
    return false;
}

// A sliding window the server takes as kept whole (--swa-full: n_swa 0,
// so it checks no window before it reuses a prefix).
bool window_whole(const ServerSettings& s) { return arch_named(s.arch).window && s.swa_full; }

// A state the server may have loaded into a slot by the failing op: the
// RAM prompt cache on, or a slot restore.
bool state_loaded(const ServerRunResult& r) {
    if (r.config.settings.cache_ram != 0) return true;
    for (const ServerOp& op : up_to_failure(r)) {
        const auto* a = std::get_if<Slot>(&op.args);
        if (a && a->action == SlotAction::restore) return true;
    }
    return false;
}

// swa-full-state-drops-window: a window kept whole, a state loaded
// (llama_kv_cache::state_write left out the cells the window masks), and
// the failing request reused part of its slot.
bool window_kept_whole_loaded(const ServerRunResult& r) {
    return window_whole(r.config.settings) && state_loaded(r) && failing_request_reused(r);
}

// swa-full-find-slot-drops-window: a window kept whole, and the failing
// request reused part of its slot: llama_kv_cache::find_slot gives the
// cells a sequence's window masks (another slot's in one unified cache, or
// the slot's own) to new tokens, --swa-full or not.
bool window_kept_whole(const ServerRunResult& r) { return window_whole(r.config.settings) && failing_request_reused(r); }

// busy-slot-takes-ram-cache: a RAM prompt cache, and at the failing op or
// before it a completion sent while a stream ran, pinned to a slot the
// stream held at that moment (its own, or a copy's before that copy
// ended): llama-server's get_available_slot returns the busy slot for the
// pinned task and runs its prompt-cache update on it (prompt_save, then
// prompt_load or prompt_clear) before deferring the task, so the stream
// decodes on from another prompt's state. From there the slot's tokens and
// the cache hold what no model of them can follow.
bool pinned_to_a_busy_slot(const ServerRunResult& r) {
    if (r.config.settings.cache_ram == 0) return false;
    const std::vector<ServerOp> ops = up_to_failure(r);
    for (std::size_t i = 0; i < ops.size() && i < r.observed.size(); ++i) {
        const auto* d = std::get_if<During>(&ops[i].args);
        const auto* then = d ? std::get_if<Completion>(&d->then) : nullptr;
        const nlohmann::json& got = r.observed[i];
        if (!then || !got.is_object() || !got.contains("stream")) continue;
        if (d->at_token > 0 && got.value("ended", false)) continue;  // the stream ended first: sent after it
        for (const ServerAnswer& a : answers_from_observed(got.at("stream"))) {
            const bool ended = d->at_token == 0 && a.index == d->index;  // the completion whose end was the moment
            if (!ended && a.slot == then->slot) return true;
        }
    }
    return false;
}

// reset-keeps-first-checkpoint: another memory than a KV cache with
// context checkpoints; at the failing op or before it, a request's cache_n
// is a count only a checkpoint of another prompt gives (the reuse model's
// walk): the server restored a checkpoint made for tokens the prompt does
// not start with. On a sliding window, whose own memory may give the same
// count (its positions the model does not follow), a count a checkpoint of
// another prompt gives, where the ground truth found an answer wrong
// (granite_swa seed 693: the server's log shows that checkpoint restored).
bool restored_another_prompts_checkpoint(const ServerRunResult& r) {
    const ServerSettings& s = r.config.settings;
    if (s.llama() || s.ctx_checkpoints == 0 || !r.failure) return false;
    SlotCacheModel cache(s, config_by_name(r.config.preset).max_seq_len);
    const std::vector<ServerOp> ops = up_to_failure(r);
    for (std::size_t i = 0; i < ops.size() && i < r.observed.size(); ++i) {
        if (const auto* a = std::get_if<Slot>(&ops[i].args)) cache.on_slot(*a, 0);
        for (const Answered& a : answered(ops[i], r.observed[i])) cache.on_completion(a.request, a.answers);
    }
    return cache.foreign_restores() > 0 || (r.failure->oracle == "ground-truth" && cache.window_or_foreign_restores() > 0);
}

struct Precondition {
    const char* name;
    const char* says;
    bool (*holds)(const ServerRunResult&);
};

constexpr Precondition kPreconditions[] = {
    {"copy-then-slot-state",
     "one KV stream per slot; a request with n_cmpl > 1, then a slot saved or restored with no request between, or the "
     "next request taking a prompt from the RAM cache",
     copy_then_slot_state},
    {"unequal-inputs-in-one-request", "mean pooling, one KV stream per slot; the failing request embeds inputs of unequal lengths",
     unequal_inputs_in_one_request},
    {"context-not-divided-by-slots", "mean pooling, -c not a multiple of -np; the server ends while it starts",
     context_not_divided_by_slots},
    {"restore-over-other-scales",
     "LoRA adapters; the failing request's slot holds a state restored from a file computed with other scales than the "
     "adapters of the slot it went into, with no request on it since (in that slot, or taken back from the RAM cache)",
     restore_over_other_scales},
    {"drafted-token-at-probability-one",
     "a draft model (-md); the failing token's log probability is reported as 0 (the server's value for an accepted draft)",
     drafted_token_at_probability_one},
    {"aborted-rotating-bf16-keys",
     "bf16 KV (-ctk bf16) with chunk reuse or context shift; the server aborted at ggml-cpu/ops.cpp:6485 (RoPE's type switch)",
     aborted_rotating_bf16_keys},
    {"pinned-to-an-empty-slot",
     "a RAM prompt cache; the failing request, or one before it, pinned to a slot that held nothing while the cache held a "
     "prompt to load there (from there the server's prompt cache holds what the reuse model moved)",
     pinned_to_an_empty_slot},
    {"ram-load-over-other-scales",
     "LoRA adapters, a RAM prompt cache; the failing request's slot took a cached prompt computed with other scales than "
     "the slot's last request ran with", ram_load_over_other_scales},
    {"pinned-to-a-busy-slot",
     "a RAM prompt cache; at the failing op or before it, a completion sent while a stream ran, pinned to a slot the stream "
     "held then (its own, or a copy's before that copy ended)",
     pinned_to_a_busy_slot},
    {"aborted-shifting-all-window-keys",
     "an lfm2 model with a sliding window (every attention layer slides), chunk reuse or context shift; the server aborted "
     "at ggml-backend.cpp:345 (GGML_ASSERT(buffer), the K-shift's input)",
     aborted_shifting_all_window_keys},
    {"window-kept-whole-loaded",
     "a sliding window with --swa-full, the RAM prompt cache on or a slot restore; the failing request reused part of its slot",
     window_kept_whole_loaded},
    {"window-kept-whole", "a sliding window with --swa-full; the failing request reused part of its slot", window_kept_whole},
    {"restored-another-prompts-checkpoint",
     "another memory than a KV cache, context checkpoints on; at the failing op or before it, a request's cache_n is a "
     "count only a checkpoint made for another prompt gives (on a sliding window, one that gives it, the ground truth "
     "having found an answer wrong)",
     restored_another_prompts_checkpoint},
    {"server-scales-over-other-scales",
     "LoRA adapters; the failing request names none (the server's scales) on a slot whose cache was computed with other "
     "scales", server_scales_over_other_scales},
};

const Precondition* precondition_named(const std::string& name) {
    for (const Precondition& p : kPreconditions)
        if (name == p.name) return &p;
    return nullptr;
}

ServerVerdict verdict_named(const std::string& s) {
    for (ServerVerdict v : {ServerVerdict::pass, ServerVerdict::fail, ServerVerdict::server_error})
        if (s == to_string(v)) return v;
    throw Error(cat("field 'verdict' = '", s, "': FAIL or SERVER_ERROR"));
}

}  // namespace

ServerSettings steered(const ServerSettings& s, const ServerKnownFinding& f) {
    nlohmann::json j = s.to_json();
    for (const auto& [name, value] : f.steer.items()) {
        require(j.contains(name), "'", name, "' is not a settings field");
        j[name] = value;
    }
    return ServerSettings::from_json(j);
}

std::vector<std::pair<std::string, std::string>> server_preconditions() {
    std::vector<std::pair<std::string, std::string>> out;
    for (const Precondition& p : kPreconditions) out.emplace_back(p.name, p.says);
    return out;
}

const ServerKnownFinding* ServerKnownFindings::match(const ServerRunResult& r) const {
    if (r.verdict == ServerVerdict::pass || !r.failure) return nullptr;
    for (const ServerKnownFinding& f : findings) {
        const bool oracle = std::count(f.oracles.begin(), f.oracles.end(), r.failure->oracle) > 0;
        if (f.verdict == r.verdict && oracle && precondition_named(f.precondition)->holds(r)) return &f;
    }
    return nullptr;
}

ServerKnownFindings load_server_known_findings(const std::string& path) {
    std::ifstream in(path);
    require(in.good(), "known findings: cannot read ", path);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false);
    ServerKnownFindings out;
    out.path = path;
    try {
        require(!j.is_discarded(), "not JSON");
        require(json_field<std::string>(j, "format") == "kvweld-server-known-findings", "not a kvweld-server-known-findings file");
        require(json_field<int>(j, "version") == 1, "version ", j.at("version").dump(), ": this build reads version 1");
        out.release = json_field<std::string>(j, "release");
        out.library = json_field<std::string>(j, "library");
        require(j.contains("findings") && j.at("findings").is_array(), "missing array 'findings'");
        for (const nlohmann::json& f : j.at("findings")) {
            ServerKnownFinding k;
            k.id = json_field<std::string>(f, "id");
            k.verdict = verdict_named(json_field<std::string>(f, "verdict"));
            k.oracles = json_field<std::vector<std::string>>(f, "oracles");
            k.precondition = json_field<std::string>(f, "precondition");
            std::string names;
            for (const auto& [name, says] : server_preconditions()) names += cat(names.empty() ? "" : ", ", name);
            require(precondition_named(k.precondition), "finding ", k.id, ": precondition '", k.precondition, "' is not one of ", names);
            k.trace = (std::filesystem::path(path).parent_path() / json_field<std::string>(f, "trace")).string();
            k.script = json_field<std::string>(f, "script");
            const std::string in = json_field<std::string>(f, "in");
            require(in == "library" || in == "server" || in == "ggml", "finding ", k.id, ": field 'in' = '", in,
                    "': library, server or ggml");
            k.own_facts = in != "library";
            if (k.own_facts) {
                k.title = json_field<std::string>(f, "title"), k.source = json_field<std::string>(f, "source");
                k.explanation = json_field<std::string>(f, "explanation");
                k.patch = f.contains("patch") ? json_field<std::string>(f, "patch") : "";  // none: no fix yet
                require(f.contains("upstream"), "finding ", k.id, ": no 'upstream' (what llama.cpp's tracker already knows)");
                k.upstream = upstream_from_json(f.at("upstream"), k.id);
            }
            if (f.contains("steer")) {
                k.steer = f.at("steer");
                require(k.steer.is_object() && !k.steer.empty(), "finding ", k.id, ": 'steer' is not an object of settings fields");
                try {
                    steered(ServerSettings::draw(0, "llama"), k);  // each field named and in its range
                } catch (const Error& e) {
                    throw Error(cat("finding ", k.id, ": steer: ", e.what()));
                }
            }
            out.findings.push_back(std::move(k));
        }
    } catch (const Error& e) {
        throw Error(cat("known findings ", path, ": ", e.what()));
    }
    return out;
}

ServerKnownFindings server_known_findings_for(const std::string& choice) {
    if (choice == "none") return {};
    if (choice != "fixed") return load_server_known_findings(choice.empty() ? KVWELD_SERVER_KNOWN_FINDINGS : choice);
    // The pinned build with its checked fixes: the findings that have none.
    ServerKnownFindings known = load_server_known_findings(KVWELD_SERVER_KNOWN_FINDINGS);
    std::ifstream in(std::filesystem::path(KVWELD_SERVER_KNOWN_FINDINGS).parent_path().parent_path().parent_path().parent_path() / known.library);
    const nlohmann::json library = nlohmann::json::parse(in, nullptr, false);
    require(library.is_object() && library.contains("findings"), "known findings: cannot read the library's file ", known.library);
    auto has_fix = [&](const ServerKnownFinding& f) {
        if (f.own_facts) return !f.patch.empty();
        for (const nlohmann::json& g : library.at("findings"))
            if (g.value("id", "") == f.id) return g.contains("patch");
        return false;
    };
    std::erase_if(known.findings, has_fix);
    known.path += " (the findings without a fix: a build with the checked fixes)";
    return known;
}

std::vector<std::string> server_unreproduced(const ServerKnownFindings& known, const std::string& server,
                                             const std::string& work_dir) {
    std::vector<std::string> out;
    for (const ServerKnownFinding& f : known.findings) {
        std::ifstream in(f.trace);
        require(in.good(), "known finding ", f.id, ": cannot read its trace ", f.trace);
        std::stringstream text;
        text << in.rdbuf();
        const ServerTrace t = parse_server_trace(text.str(), f.trace);
        ServerRunConfig c = t.config;
        c.server = server, c.work_dir = cat(work_dir, "/known-", f.id);
        const ServerRunResult r = run_server_ops(c, t.ops);
        if (known.match(r) != &f)
            out.push_back(cat("known finding ", f.id, ": its trace ", f.trace, " no longer fails as recorded (", to_string(f.verdict),
                              " by ", f.oracles.front(), ", precondition ", f.precondition, "); it ended ", to_string(r.verdict),
                              r.failure ? cat(" at op ", r.failure->op, " (", r.failure->oracle, ")") : ""));
        else
            std::filesystem::remove_all(c.work_dir);
    }
    return out;
}

}  // namespace kvweld::sim::server
