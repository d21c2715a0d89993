// A server finding as a shell script (sim/server/server_run.hpp
// server_script): llama-server started with the run's flags, the trace's
// requests sent with curl, the failing one's answer compared with what
// kvweld's reference and cache model expect, written into the script.
#include "engine/gguf.hpp"
#include "sim/server/server_oracles.hpp"
#include "sim/server/server_wire.hpp"
#include "sim/server/server_run.hpp"

#include "util/cat.hpp"
#include "util/overloaded.hpp"
#include "util/error.hpp"

#include <nlohmann/json.hpp>

namespace kvweld::sim::server {

namespace {

std::string quoted(const nlohmann::json& j) { return cat("'", j.dump(), "'"); }

// The reference's top 4 (id, logprob) at each generated position of `tokens` after `prompt`, fresh;
// `greedy`: along the reference's own most likely tokens instead (as many), what a right server generates.
nlohmann::json expected_logprobs(const Model& model, const Adapters& adapters, const std::vector<int>& prompt,
                                 std::vector<int> tokens, KvType kv_type, bool greedy) {
    ReferenceKv kv(model.config(), kv_type);
    std::vector<int> held = prompt;
    held.insert(held.end(), tokens.begin(), tokens.end());
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t pos = 0; pos + 1 < held.size() && out.size() < tokens.size(); ++pos) {
        const std::vector<float> logits = reference_forward(model, kv, held[pos], int(pos), adapters);
        if (pos + 1 < prompt.size()) continue;
        const std::vector<double> lp = log_probs(logits);
        std::vector<int> order(lp.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = int(i);
        std::partial_sort(order.begin(), order.begin() + 4, order.end(), [&](int x, int y) { return lp[std::size_t(x)] > lp[std::size_t(y)]; });
        nlohmann::json top = nlohmann::json::object();
        for (int k = 0; k < 4; ++k) top[std::to_string(order[std::size_t(k)])] = lp[std::size_t(order[std::size_t(k)])];
        if (greedy) tokens[out.size()] = held[pos + 1] = order[0];
        out.push_back({{"token", tokens[out.size()]}, {"top", top}});
    }
    return out;
}

// The shell line that sends one completion; `capture`: into that file.
std::string send_line(const Completion& c, const std::string& capture) {
    const nlohmann::json body = completion_body(c);
    if (c.cancel_after > 0)  // a stream closed after cancel_after events (two lines each), then the slot left to end
        return cat("curl -sN --max-time 60 \"$url/completion\" -d ", quoted(body), " | head -n ", 2 * c.cancel_after,
                   " > /dev/null; idle");
    return cat("post /completion ", quoted(body), " > ", capture.empty() ? "/dev/null" : capture);
}

// The shell line that sets the server's LoRA scales.
std::string lora_line(const std::vector<float>& scales) {
    return cat("post /lora-adapters ", quoted(lora_body(scales)), " > /dev/null");
}

// A during op's lines: the stream in the background into $dir/stream, and
// what goes out once the stream reaches the moment (a completion into
// `capture`), then the stream's end awaited.
std::string during_lines(const During& a, const std::string& capture) {
    const std::string then = std::visit(Overloaded{[&](const Completion& c) { return send_line(c, capture); },
                                                   [](const Lora& l) { return lora_line(l.scales); }},
                                        a.then);
    return cat("curl -sN --max-time 60 \"$url/completion\" -d ", quoted(completion_body(a.stream)), " > \"$dir/stream\" & spid=$!\n",
               "moment \"$dir/stream\" ", a.index, " ", a.at_token, " $spid\n", then, "\nwait $spid\n");
}

// The stream's events in $dir/stream as one whole answer in $dir/answer-0.
const char* kStreamToAnswer = R"(python3 - "$dir" <<'PY'
import json, sys
answer = {"tokens": [], "completion_probabilities": [], "timings": {"cache_n": -1}}
for line in open(sys.argv[1] + "/stream"):
    if not line.startswith("data: {"): continue
    e = json.loads(line[6:])
    answer["tokens"] += e.get("tokens", [])
    answer["completion_probabilities"] += e.get("completion_probabilities", [])
    if e.get("stop"): answer["timings"] = e["timings"]
json.dump(answer, open(sys.argv[1] + "/answer-0", "w"))
PY
)";

const char* kPrelude = R"(server=$1 model=$2
dir=$(mktemp -d) pid= url=
trap '[[ -z $pid ]] || { kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null; }; rm -rf "$dir"' EXIT
)";

const char* kHelpers = R"(post() { curl -sf --max-time 60 "$url$1" -d "$2" || { { echo "POST $1 failed; the server's log ends:"; tail -3 "$dir/log"; ((FAILED != 1)) || echo "FINDING SHOWN: exit 1"; } >&2; exit $FAILED; }; }
# moment FILE I K PID: until completion I of the stream in FILE has sent K tokens' events (K 0: its last), or PID
# ended; no sleep, so the request after it goes out while the stream still runs.
moment() { until { (($3 > 0)) && (($(grep -c "\"index\":$2,.*\"stop\":false" "$1") >= $3)); } || { (($3 == 0)) && grep -q "\"index\":$2,.*\"stop\":true" "$1"; } || ! kill -0 "$4" 2> /dev/null; do :; done; }
idle() { until curl -sf "$url/slots" | python3 -c 'import json, sys; sys.exit(any(s["is_processing"] for s in json.load(sys.stdin)))'; do sleep 0.05; done; }
)";

// An op's requests as the script sends them (a burst's at once), their answers discarded.
std::string op_lines(const ServerOp& op) {
    return std::visit(
        [&](const auto& a) -> std::string {
            using T = std::decay_t<decltype(a)>;
            if constexpr (std::is_same_v<T, Complete>) {
                return send_line(a.request, "") + "\n";
            } else if constexpr (std::is_same_v<T, Burst>) {
                std::string out;
                for (const Completion& c : a.requests) out += send_line(c, "") + " &\n";
                return out + "wait\n";
            } else if constexpr (std::is_same_v<T, Slot>) {
                return cat("post \"/slots/", a.slot, "?action=", to_string(a.action), "\" ",
                           a.action == SlotAction::erase ? "'{}'" : cat("'{\"filename\": \"slot-", a.file, ".bin\"}'"), " > /dev/null\n");
            } else if constexpr (std::is_same_v<T, Embed>) {
                return cat("post /embedding ", quoted(nlohmann::json{{"content", a.inputs}}), " > /dev/null\n");
            } else if constexpr (std::is_same_v<T, Lora>) {
                return lora_line(a.scales) + "\n";
            } else {
                static_assert(std::is_same_v<T, During>, "every server op kind is written");
                return during_lines(a, "");
            }
        },
        op.args);
}

}  // namespace

std::vector<ServerScriptFile> server_script_files(const ServerRunConfig& c) {
    const ModelConfig config = config_by_name(c.preset);
    const std::string at = cat("kvweld convert --config ", c.preset, " --seed ");
    std::vector<ServerScriptFile> out = {{"model.gguf", cat(at, c.seed, " --vocab test model.gguf"),
                                          serialize_gguf(Model::random(config, c.seed), Vocab::test)}};
    const auto loras = server_loras(config, c.seed, c.settings.loras);
    for (std::size_t i = 0; i < loras.size(); ++i)
        out.push_back({cat("lora-", i, ".gguf"), cat(at, c.seed, " --lora ", i, " lora-", i, ".gguf"), serialize_gguf_lora(*loras[i])});
    if (c.settings.draft) {
        const std::uint64_t seed = draft_seed(c.seed, c.settings.draft);
        out.push_back({"draft.gguf", cat(at, seed, " --vocab test draft.gguf"), serialize_gguf(Model::random(config, seed), Vocab::test)});
    }
    return out;
}

std::string server_script(const ServerRunResult& r, const std::string& command) {
    require(r.failure.has_value(), "repro: the trace passes: there is no finding to write");
    const ServerFailure& f = *r.failure;
    const ServerSettings& s = r.config.settings;
    require(s.cache_reuse == 0 || f.oracle == "server" || f.oracle == "embeddings",
            "repro: the trace needs --cache-reuse ", s.cache_reuse, " (the shrinker kept it): its expected answer is a "
            "chunk-shifted one, which the script writer does not compute; kvweld replay --server judges it");
    require(s.llama(), "repro: the trace's model is arch '", s.arch, "': the script's expected answer is kvweld's reference, "
                       "which knows llama only; kvweld replay --server judges it against the ground truth");
    const Model model = Model::random(config_by_name(r.config.preset), r.config.seed);
    // The server's command line as the simulator's, its files the script's arguments ($3 on).
    std::string lora_files, lora_args;
    const std::vector<ServerScriptFile> files = server_script_files(r.config);
    ServerFiles args{"\"$dir/\"", {}, ""};
    for (std::size_t i = 1; i < files.size(); ++i) {
        const std::string word = cat("\"$", 2 + i, "\"");
        if (i <= std::size_t(s.loras)) args.loras.push_back(word);
        else args.draft = word;
        lora_files += cat("#   ", files[i].convert, "\n");
        lora_args += " " + files[i].name;
    }
    std::string flags;
    for (const std::string& w : server_args(s, model.config().max_seq_len, args)) flags += cat(flags.empty() ? "" : " ", w);
    std::string out = cat("#!/usr/bin/env bash\n# llama-server (", s.describe(), "), ", f.oracle, " at op ", f.op, ": ",
                          f.message.substr(0, f.message.find('\n')).substr(0, 160), "\n# Written by `", command,
                          "` from a server trace (seed ", r.config.seed, ", ", r.ops.size(),
                          " requests). It starts llama-server on 127.0.0.1 at an ephemeral port, sends\n# the requests with curl, "
                          "and compares the last one's answer with kvweld's reference,\n# written below for the model of:\n"
                          "#   ", files[0].convert, "\n",
                          lora_files, "#   <this script> <llama-server> model.gguf", lora_args, "\n"
                          "# Exit 1: the finding shows; 0: it does not; 2: it could not run.\n");
    out += cat("set -u\n(($# >= ", 1 + files.size(), ")) || { echo \"usage: $0 <llama-server> <model.gguf>", lora_args,
               "\"; exit 2; }\n", kPrelude);
    const bool at_start = f.oracle == "server" && r.ops.size() <= 1 && f.op == 0 && f.message.find("while starting") != std::string::npos;
    out += cat("FAILED=2\nGGML_NO_BACKTRACE=1 \"$server\" -m \"$model\" --host 127.0.0.1 --port 0 ", flags, " > \"$dir/log\" 2>&1 & pid=$!\n",
               "for _ in $(seq 600); do\n",
               "  url=$(sed -n 's|.*listening on \\(http://127.0.0.1:[0-9]*\\).*|\\1|p' \"$dir/log\" | head -1)\n",
               "  [[ -n $url ]] && curl -sf \"$url/health\" > /dev/null && break\n",
               "  kill -0 \"$pid\" 2> /dev/null || { wait \"$pid\"; rc=$? pid=; echo \"llama-server ended while starting (exit $rc); its log ends:\"; tail -3 \"$dir/log\"; ",
               at_start ? "echo \"FINDING SHOWN: exit 1\"; exit 1; }\n" : "exit 2; }\n",
               "  url= && sleep 0.1\ndone\n[[ -n $url ]] || { echo \"llama-server did not answer /health in 60 s\"; exit 2; }\n");
    if (at_start) return out + "echo \"llama-server started and serves: not shown: exit 0\"\n";
    out += kHelpers;
    // Every op before the failing one, as the trace sent it.
    SlotCacheModel cache(s, model.config().max_seq_len);
    const auto loras = server_loras(model.config(), r.config.seed, s.loras);
    for (std::size_t i = 0; i < f.op; ++i) {
        out += cat("# op ", i, ": ", to_string(r.ops[i].kind()), "\n", op_lines(r.ops[i]));
        if (const auto* a = std::get_if<Slot>(&r.ops[i].args)) cache.on_slot(*a, r.observed[i].begin().value().template get<int>());
        for (const Answered& a : answered(r.ops[i], r.observed[i])) cache.on_completion(a.request, a.answers);
        if (const std::optional<Lora> l = scales_set(r.ops[i])) cache.on_lora(*l);
    }
    // A server that died or hung at the failing op: the finding shows where its requests fail (post exits 1).
    if (f.oracle == "server")
        return out + cat("# op ", f.op, ", the failing one: ", to_string(r.ops[f.op].kind()), "\nFAILED=1\n", op_lines(r.ops[f.op]),
                         "echo \"llama-server answered every request: not shown: exit 0\"\n");
    // The failing op: its answers captured, each judged against what the trace's run expected.
    out += cat("# op ", f.op, ", the failing one: ", to_string(r.ops[f.op].kind()), "\nFAILED=1\n");
    nlohmann::json expect = nlohmann::json::array();
    // What the trace's run expected of request k of the failing op: its cache_n range and each answer's logprobs.
    auto expect_answers = [&](const Answered& request, std::size_t k) {
        const Completion& c = request.request;
        const std::vector<ServerAnswer>& answers = request.answers;
        const auto [lo, hi] = cache.allowed(c, answers.at(0).slot);
        nlohmann::json each = nlohmann::json::array();
        const Adapters adapters = adapters_at(model.config(), loras, cache.scales(c));
        for (const ServerAnswer& ans : answers) {
            require(context_shifts(c, ans, s.shift_ctx(model.config().max_seq_len)).empty(),
                    "repro: the failing request fills its slot and the server shifts its context: its expected "
                    "answer is over shifted KV, which the script writer does not compute; kvweld replay --server judges it");
            each.push_back(expected_logprobs(model, adapters, c.prompt, ans.tokens, s.kv_type, c.temperature == 0));
        }
        expect.push_back({{"kind", "completion"}, {"file", cat("$dir/answer-", k)}, {"cache_n", {lo, hi}}, {"answers", each},
                          {"greedy", c.temperature == 0}});
    };
    std::visit(
        [&](const auto& a) {
            using T = std::decay_t<decltype(a)>;
            if constexpr (std::is_same_v<T, Complete> || std::is_same_v<T, Burst>) {
                const std::vector<Answered> requests = answered(r.ops[f.op], r.observed[f.op]);
                for (std::size_t k = 0; k < requests.size(); ++k) {
                    Completion c = requests[k].request;
                    c.stream = false, c.cancel_after = 0;  // read whole, to compare
                    expect_answers(requests[k], k);
                    out += send_line(c, cat("\"$dir/answer-", k, "\"")) + (requests.size() > 1 ? " &\n" : "\n");
                }
                if (requests.size() > 1) out += "wait\n";
            } else if constexpr (std::is_same_v<T, Slot> || std::is_same_v<T, Lora>) {
                throw Error(cat("repro: the failing op is a ", T::name, " op (", f.message,
                                "): the script writer compares answers only; kvweld replay --server shows it"));
            } else if constexpr (std::is_same_v<T, During>) {
                require(a.stream.n_cmpl == 1, "repro: the failing op's stream has n_cmpl ", a.stream.n_cmpl,
                        ": the script writer reads one completion's events; kvweld replay --server shows it");
                // The stream, judged as the oracles did, then what went out while it ran (over the slots as the stream left them).
                const std::vector<Answered> requests = answered(r.ops[f.op], r.observed[f.op]);
                expect_answers(requests.at(0), 0);
                if (requests.size() > 1) cache.on_completion(requests[0].request, requests[0].answers), expect_answers(requests[1], 1);
                out += during_lines(a, "\"$dir/answer-1\"") + kStreamToAnswer;
            } else {
                static_assert(std::is_same_v<T, Embed>, "every server op kind is written");
                nlohmann::json want = nlohmann::json::array();
                for (const std::vector<int>& in : a.inputs) want.push_back(reference_embedding(model, in, s.pooling, s.kv_type));
                expect.push_back({{"kind", "embedding"}, {"file", "$dir/answer-0"}, {"want", want}});
                out += cat("post /embedding ", quoted(nlohmann::json{{"content", a.inputs}}), " > \"$dir/answer-0\"\n");
            }
        },
        r.ops[f.op].args);
    // The trace's KV type sets the tolerance, as the oracles judged the run:
    // 16-bit rows round away more than F32's 1e-4 on a correct server.
    out += cat("python3 - \"$dir\" <<'PY'\nimport json, sys\nexpect = json.loads(", quoted(expect), ")\ntol = ",
               kv_tolerance(s.kv_type), "  # with ", kv_type_name(s.kv_type), " KV rows, as the oracles judged the trace\n",
               R"PY(shown = False
for e in expect:
    got = json.load(open(e["file"].replace("$dir", sys.argv[1])))
    if e["kind"] == "embedding":
        for i, want in enumerate(e["want"]):
            row = got[i]["embedding"][0]
            d = max(abs(x - y) for x, y in zip(row, want))
            print(f"input {i}: max |embedding - kvweld's reference| = {d:.3g} (tolerance {tol:g})")
            shown |= d > tol
        continue
    for n, (answer, want) in enumerate(zip(got if isinstance(got, list) else [got], e["answers"])):
        lo, hi = e["cache_n"]
        if n == 0 and not lo <= answer["timings"]["cache_n"] <= hi:
            print(f"completion {n}: cache_n {answer['timings']['cache_n']}, but kvweld's cache model allows {lo} to {hi} (what the slot held, or the prompt cache gave it)")
            shown = True
        for i, (step, w) in enumerate(zip(answer["completion_probabilities"], want)):
            top = {p["id"]: p["logprob"] for p in step["top_logprobs"]}
            d = max((abs(top[int(t)] - lp) if int(t) in top else float("inf")) for t, lp in w["top"].items())
            own = w["top"].get(str(answer["tokens"][i]))  # the token's own logprob, where it is in the reference's top 4
            if own is not None:
                d = max(d, abs(step["logprob"] - own))
            print(f"completion {n}, token {i}: {answer['tokens'][i]} (the reference's most likely: {max(w['top'], key=w['top'].get)}); "
                  f"its logprob {step['logprob']:.6g}" + ("" if own is None else f" (the reference's {own:.6g})") + f", "
                  f"{len(top)} top logprobs; max |logprob - reference| over the reference's top 4 = {d:.3g} (tolerance {tol:g})")
            shown |= d > tol
            if answer["tokens"][i] != w["token"]:
                # greedy: the reference's most likely, unless the two are a near tie; sampled: the trace's token
                own = w["top"].get(str(answer["tokens"][i]), float("-inf"))
                if e["greedy"] and w["top"][str(w["token"])] - own > tol:
                    print(f"completion {n}, token {i}: {answer['tokens'][i]}, greedy, but the reference's most likely is {w['token']}")
                    shown = True
                break  # the reference's next values are for its own tokens
print("FINDING SHOWN: exit 1" if shown else "not shown: exit 0")
sys.exit(1 if shown else 0)
PY
)PY");
    return out;
}

}  // namespace kvweld::sim::server
