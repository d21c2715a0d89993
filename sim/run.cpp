#include "sim/run.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "sim/ddmin.hpp"
#include "sim/op_table.hpp"
#include "sim/jsonl.hpp"
#include "sim/known_findings.hpp"
#include "sim/report.hpp"
#include "sim/seed_pool.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

namespace kvweld::sim {

namespace {

// The generator's PRNG is separate from the one that drew the config.
constexpr std::uint64_t kServeOpStream = 0x73657276652d6f70ULL;

// f(args) on the op's typed arguments, whatever its kind.
template <class F>
bool on_args(Op& op, F&& f) {
    return std::visit([&](auto& args) -> bool { return f(args); }, op.args);
}

RunResult finish(Simulator& sim, int steps, std::vector<Op> ops) {
    sim.end();
    return RunResult{sim.config(),  steps,         std::move(ops), sim.stats(),       sim.oracles(),
                     sim.verdict(), sim.failure(), "",             sim.reuse_diffs(), sim.ended_early()};
}

}  // namespace

RunResult run_generated(const SimConfig& config, int steps, bool checked) {
    Simulator sim(config, checked);
    Rng rng(config.seed ^ kServeOpStream);
    RngEntropy entropy(rng);
    std::vector<Op> ops;
    for (int i = 0; i < steps; ++i) {
        ops.push_back(draw_op(sim, entropy));
        if (!sim.apply(ops.back(), ops.size() - 1)) break;
    }
    return finish(sim, steps, std::move(ops));
}

RunResult run_ops(const SimConfig& config, const std::vector<Op>& ops, int steps,
                  const std::function<void(Simulator&)>& before) {
    Simulator sim(config);
    if (before) before(sim);
    std::vector<Op> ran;
    for (const Op& op : ops) {
        ran.push_back(op);
        if (!sim.apply(op, ran.size() - 1)) break;
    }
    return finish(sim, steps, std::move(ran));
}

std::string trace_text(const RunResult& r) {
    const nlohmann::json header = {{"format", kTraceFormat},
                                   {"version", kTraceVersion},
                                   {"seed", r.config.seed},
                                   {"steps", r.steps},
                                   {"config", r.config}};
    std::string out = header.dump() + "\n";
    for (const Op& op : r.ops) out += nlohmann::json(op).dump() + "\n";
    return out;
}

Trace parse_trace(const std::string& text, const std::string& origin) {
    Trace t;
    read_jsonl(text, origin, [&](int number, const nlohmann::json& j) {
        if (number > 1) {
            t.ops.push_back(op_from_json(j));
            if (t.ops.back().kind() == OpKind::admit)
                for (int token : t.ops.back().as<ops::Admit>().prompt)
                    require(token < t.config.model.vocab, "prompt token ", token,
                            " out of range: the model's vocab is ", t.config.model.vocab);
            return;
        }
        const std::string format = j.is_object() ? j.value("format", "") : "";
        require(format == kTraceFormat || format == "kvweld-serve-trace",
                "not a kvweld trace header (expected \"format\": \"", kTraceFormat, "\")");
        const int version = j.contains("version") && j.at("version").is_number_integer() ? j.at("version").get<int>() : -1;
        // Before version 3 there were two simulators and two formats; their
        // seeds drew other ops, so an old trace is refused, not converted.
        require(format == kTraceFormat && version == kTraceVersion, "trace version ", version, " (format ",
                format, ") is not supported: this build reads ", kTraceFormat, " version ", kTraceVersion,
                " (one simulator for every engine); record it again with kvweld sim --trace");
        require(j.contains("steps") && j.at("steps").is_number_integer() && j.at("steps").get<int>() >= 0,
                "header has no 'steps' >= 0");
        require(j.contains("config"), "header has no 'config'");
        t.steps = j.at("steps").get<int>();
        t.config = config_from_json(j.at("config"));
    });
    require(t.ops.size() <= std::size_t(t.steps), "trace ", origin, ": ", t.ops.size(),
            " ops but the header says ", t.steps, " steps");
    return t;
}

namespace {

std::uint64_t model_size(const ModelConfig& m) {
    return std::uint64_t(m.dim) * std::uint64_t(m.n_layers) * std::uint64_t(m.ffn_dim * m.experts_stored() + 4 * m.dim) +
           std::uint64_t(m.vocab) * std::uint64_t(m.dim);
}

// The run itself made smaller, smallest first: fewer sequences, half the
// positions each, a smaller model of the same family (a reproducer then
// needs fewer calls and a smaller model).
std::vector<SimConfig> smaller_configs(const SimConfig& c) {
    std::vector<SimConfig> out;
    for (int seqs = 1; seqs < c.seqs; ++seqs) {
        SimConfig x = c;
        x.seqs = seqs;
        if (x.engine.seqs) x.engine.seqs = seqs;
        out.push_back(x);
    }
    if (c.capacities.empty() && c.n_ctx / 2 > c.max_prompt) {
        SimConfig x = c;
        x.n_ctx = c.n_ctx / 2;
        if (x.engine.n_ctx) x.engine.n_ctx = x.n_ctx;
        out.push_back(x);
    }
    std::vector<ModelPreset> models;
    for (const ModelPreset& p : model_presets())
        if (p.config.family == c.model.family && model_size(p.config) < model_size(c.model) &&
            p.config.max_seq_len >= c.n_ctx)
            models.push_back(p);
    std::sort(models.begin(), models.end(),
              [](const ModelPreset& a, const ModelPreset& b) { return model_size(a.config) < model_size(b.config); });
    for (const ModelPreset& p : models) {
        SimConfig x = c;
        x.model = p.config;
        x.model_name = std::string(p.name);
        out.push_back(x);
    }
    return out;
}

}  // namespace

ShrinkResult shrink(const SimConfig& config, const std::vector<Op>& ops, int steps, Verdict target, int max_runs,
                    ShrinkKeep keep) {
    require(target != Verdict::pass, "shrink: the trace passes; there is nothing to shrink");
    ShrinkResult out;
    std::optional<FailureIdentity> identity;
    // One candidate run (a config, ops): kept where it fails the same way.
    SimConfig current = config;
    auto try_run = [&](const SimConfig& c, const std::vector<Op>& candidate) {
        if (out.runs >= max_runs) return false;
        ++out.runs;
        RunResult r = run_ops(c, candidate, steps);
        if (r.verdict != target) return false;
        // The same failure, not only its class: the first run names it.
        const FailureIdentity id = identity_of(r.verdict, r.failure ? &*r.failure : nullptr);
        if (keep == ShrinkKeep::identity && identity && id != *identity) return false;
        if (!identity) identity = id;
        current = c;
        out.ops = r.ops;
        out.result = std::move(r);
        return true;
    };
    auto try_keep = [&](const std::vector<Op>& candidate) { return try_run(current, candidate); };
    require(try_keep(ops), "shrink: the trace does not fail with ", to_string(target));
    // Each simplification acts on the kinds whose arguments have its field.
    using Simplify = bool (*)(Op&);
    const Simplify simplifications[] = {
        [](Op& op) {  // the first eligible sequence (or saved state)
            return on_args(op, [](auto& a) {
                if constexpr (requires { a.pick; }) return zero(a.pick);
                else if constexpr (requires { a.state; }) return zero(a.state);
                else return false;
            });
        },
        [](Op& op) {  // the first destination, capacity, bad call or discard draw
            return on_args(op, [](auto& a) {
                if constexpr (requires { a.to; }) return zero(a.to);
                else if constexpr (requires { a.capacity; }) return zero(a.capacity);
                else if constexpr (requires { a.call; }) return zero(a.call);
                else if constexpr (requires { a.discard; }) return zero(a.discard);
                else return false;
            });
        },
        [](Op& op) {  // halve a prompt
            return on_args(op, [](auto& a) {
                if constexpr (requires { a.prompt; }) {
                    if (a.prompt.size() < 2) return false;
                    a.prompt.resize(a.prompt.size() / 2);
                    return true;
                } else {
                    return false;
                }
            });
        },
        [](Op& op) {
            return on_args(op, [](auto& a) {
                bool changed = false;
                if constexpr (requires { a.prompt; })
                    for (int& t : a.prompt) changed = zero(t) || changed;
                return changed;
            });
        },
        [](Op& op) {  // fewer sequences in a step
            return on_args(op, [](auto& a) {
                if constexpr (requires { a.wants; })
                    for (int& w : a.wants)
                        if (w != 0) return zero(w);
                return false;
            });
        },
        [](Op& op) {  // one token each
            return on_args(op, [](auto& a) {
                bool changed = false;
                if constexpr (requires { a.wants; })
                    for (int& w : a.wants) changed = (w > 1 ? (w = 1, true) : false) || changed;
                return changed;
            });
        },
        [](Op& op) {
            return on_args(op, [](auto& a) {
                if constexpr (requires { a.max_new; }) return zero(a.max_new);
                else return false;
            });
        },
        [](Op& op) {  // the shortest length, kept prefix or phase
            return on_args(op, [](auto& a) {
                if constexpr (requires { a.length; }) return zero(a.length);
                else if constexpr (requires { a.keep; }) return zero(a.keep);
                else if constexpr (requires { a.steps; }) return zero(a.steps);
                else return false;
            });
        },
        [](Op& op) {
            return on_args(op, [](auto& a) {
                if constexpr (requires { a.seed; }) return zero(a.seed);
                else if constexpr (requires { a.rewrite; }) return zero(a.rewrite.seed);
                else return false;
            });
        },
    };
    shrink_ops(out.ops, simplifications, try_keep, [&] { return out.runs >= max_runs; });
    // Then the run's own size, each change kept where the failure stays,
    // and the ops once more under the smaller run.
    bool resized = false;
    for (bool smaller = true; smaller && out.runs < max_runs;) {
        smaller = false;
        for (const SimConfig& c : smaller_configs(current)) {
            if (out.runs >= max_runs) break;
            try {
                smaller = try_run(c, out.ops);
            } catch (const Error&) {
                continue;  // a run the engine cannot be opened for
            }
            if (smaller) {
                resized = true;
                break;
            }
        }
    }
    if (resized) shrink_ops(out.ops, simplifications, try_keep, [&] { return out.runs >= max_runs; });
    return out;
}

namespace {

// kvweld diff's: the same seed alone, both engines as they ran.
std::string diff_command(const SimConfig& c, int steps) {
    const PeerChoice& p = *c.engine.peer;
    std::string cmd = cat("kvweld diff --engine ", c.engine.engine, " --engine ", p.engine, " --seeds ", c.seed, "..",
                          c.seed, " --steps ", steps, " --model ", c.model_name);
    if (!c.engine.params.empty()) cmd += cat(" --params ", c.engine.params);
    if (p.params != c.engine.params) cmd += cat(" --params-b '", p.params, "'");
    if (c.engine.seqs) cmd += cat(" --seqs ", c.engine.seqs);
    if (c.engine.n_ctx) cmd += cat(" --n-ctx ", c.engine.n_ctx);
    for (const std::string& f : abi::split_list(c.engine.faults.c_str())) cmd += cat(" --fault ", f);
    for (const std::string& f : abi::split_list(p.faults.c_str())) cmd += cat(" --fault-b ", f);
    if (p.tolerance != PeerChoice{}.tolerance) cmd += cat(" --tolerance ", p.tolerance);
    return cmd;
}

}  // namespace

std::string reproduce_command(const SimConfig& c, int steps) {
    if (c.engine.peer) return diff_command(c, steps);
    std::string cmd = cat("kvweld sim --engine ", c.engine.engine, " --seed ", c.seed, " --steps ", steps,
                          " --model ", c.model_name);
    if (!c.engine.params.empty()) cmd += cat(" --params ", c.engine.params);
    if (c.engine.seqs) cmd += cat(" --seqs ", c.engine.seqs);
    if (c.engine.n_ctx) cmd += cat(" --n-ctx ", c.engine.n_ctx);
    if (!c.engine.faults.empty()) cmd += cat(" --fault ", c.engine.faults);
    if (c.engine.twin) cmd += " --twin";
    return cmd;
}

namespace {


// The reuse condition's coverage: per term the plan pairs where it changed
// alone, changed with others and held; the terms never exercised; those
// out of the API's reach.
std::string terms_rows(const RunStats& s) {
    if (s.terms.empty()) return "";
    std::string counts, never, unreachable;
    for (const auto& [name, t] : s.terms) {
        counts += cat(counts.empty() ? "" : ", ", name, " ", t.alone, "/", t.changed - t.alone, "/", t.held);
        if (!t.exercised()) never += cat(never.empty() ? "" : ", ", name);
    }
    for (const auto& [name, why] : s.terms_unreachable)
        if (!s.terms.count(name))  // reachable in another seed's settings
            unreachable += cat(unreachable.empty() ? "" : "; ", name, " (", why, ")");
    return table_row("reuse terms (alone/with others/held)", counts) +
           table_row("reuse terms never exercised", never.empty() ? "none" : never) +
           (unreachable.empty() ? "" : table_row("reuse terms out of reach", unreachable));
}

std::string stats_rows(const RunStats& s, const OracleReport& oracles) {
    const bool accounting = oracles.accounting;
    std::string out;
    std::string kinds;
    for (int k = 0; k < kOpKinds; ++k)
        if (s.ops_by_kind[std::size_t(k)])
            kinds += cat(kinds.empty() ? "" : " ", to_string(OpKind(k)), "=", s.ops_by_kind[std::size_t(k)]);
    out += table_row("ops run", cat(s.ops_run, " (", kinds, ")"));
    out += table_row("requests / engine calls", cat(s.requests, " / ", s.calls, " (", s.batched_calls, " batched, ",
                                                    s.same_shape_calls, " of the last call's shape)"));
    out += table_row("rows / by the reference (max logit / K/V error)",
                     cat(s.rows, " / ", s.reference_rows, " (", oracles.data ? sci(s.max_logit_error) : "-", " / ",
                         oracles.kv ? sci(s.max_kv_error) : "-", ")"));
    if (s.embedding_rows)
        out += table_row("embeddings by the reference (max error)",
                         cat(s.embedding_rows, " (", sci(s.max_embedding_error), ")"));
    if (s.routing_tie_rows)
        out += table_row("rows left unjudged: MoE routing ties", cat(s.routing_tie_rows));
    if (s.non_causal_spans)
        out += table_row("non-causal spans by the reference (tokens)", cat(s.non_causal_spans, " (", s.non_causal_tokens, ")"));
    if (s.sampled_rows || s.sampled_compared)
        out += table_row("sampled tokens: by the reference / equal to the second engine's",
                         cat(s.sampled_rows, " / ", s.sampled_compared));
    out += table_row("drafts (rejected)", cat(s.drafts, " (", s.rejected, ")"));
    if (s.aborted_calls)
        out += table_row("calls aborted (tokens kept of those fed; not judged)",
                         cat(s.aborted_calls, " (", s.aborted_kept, " of ", s.aborted_fed, "; ", s.unjudged_aborted, ")"));
    out += table_row("invalid calls refused", cat(s.refused));
    if (oracles.twin)
        out += table_row("rows equal to the twin's", cat(s.twin_rows, s.twin_within_tolerance ? cat(" (", s.twin_within_tolerance,
                                                                      " within the engine's declared tolerance)") : ""));
    if (oracles.peer) {
        out += peer_rows(s, oracles);
    } else if (!accounting && s.reused + s.builds + s.rebinds > 0) {
        out += table_row("plans as the engine counted them (no rule)",
                         cat("reused ", s.reused, ", built ", s.builds, ", rebound ", s.rebinds, " (reuse ",
                             fixed(s.counted_reuse_ratio(), 4), ")"));
    }
    if (accounting) {
        out += table_row("plans run / reused", cat(s.plans, " / ", s.reused));
        out += table_row("reuse ratio (rule's ideal)", cat(fixed(s.reuse_ratio(), 4), " (", fixed(s.ideal_ratio(), 4),
                                                     s.may_reuse ? cat(", +", s.may_reuse, " allowed") : "", ")"));
        out += table_row("reuse required (of a shared plan)", cat(s.must_reuse, " (", s.must_reuse_shared, ")"));
        out += terms_rows(s);
    }
    if (oracles.white_box)
        out += cat("blind spots: ", s.change_decodes, " decodes after a storage/model change; ", s.data_blind,
                   " blind to the data oracle; ", s.independent_blind,
                   " blind to data and kv (every oracle that reads no engine report), ", s.blind_same_weights_reload,
                   " of them after a same-weights reload\n");
    return out;
}

std::string plans_text(std::uint64_t reused, std::uint64_t builds, std::uint64_t rebinds) {
    return cat(reused, " / ", builds, " / ", rebinds, " (reuse ", fixed(counted_reuse_ratio(reused, builds, rebinds), 4), ")");
}

std::string failure_line(const RunResult& r) {
    if (r.verdict == Verdict::reuse_differs && r.failure)  // its detail says it all
        return cat("verdict: FAIL reuse_differs from op ", r.failure->op_index, ": ", r.failure->detail);
    std::string out = cat("verdict: FAIL ", to_string(r.verdict));
    if (r.failure)
        out += cat(" at op ", r.failure->op_index, " (", r.failure->op, ", ", to_string(r.failure->oracle),
                   " oracle): ", r.failure->detail,
                   r.failure->clause.empty() ? "" : cat(" [the call's contract clause: ", r.failure->clause, "]"));
    return out;
}

}  // namespace

ShrunkTrace shrink_seed(const SimConfig& config, int steps, int max_runs, const std::string& path) {
    const RunResult full = run_generated(config, steps);
    require(full.verdict != Verdict::pass, "shrink: seed ", config.seed, " passes when run again");
    const ShrinkResult s = shrink(full.config, full.ops, full.steps, full.verdict, max_runs);
    ShrunkTrace out{config.seed, s.result.verdict, full.ops.size(), s.ops.size(), path, s.result.failure};
    if (path.empty()) return out;
    if (const auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) std::filesystem::create_directories(dir);
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << trace_text(s.result);
    require(file.good(), "cannot write the shrunk trace ", path);
    return out;
}

std::string peer_rows(const RunStats& s, const OracleReport& oracles) {
    std::string out = table_row("rows compared with the peer's (max logit error)",
                                cat(s.peer_rows, " (", sci(s.max_peer_error), ")"));
    if (!oracles.peer_reuse_why_not.empty()) return out;
    out += table_row("plans reused / built / rebound: A", plans_text(s.reused, s.builds, s.rebinds));
    out += table_row("plans reused / built / rebound: B", plans_text(s.peer_reused, s.peer_builds, s.peer_rebinds));
    return out + table_row("calls prepared differently", cat(s.reuse_diffs(), " (A reused more ", s.reuse_more, ", fewer ",
                                                            s.reuse_fewer, ", as many but built or rebound otherwise ",
                                                            s.prepared_otherwise, ")"));
}

std::string reuse_diff_lines(const RunResult& r, std::size_t most) {
    std::string out;
    for (std::size_t i = 0; i < r.reuse_diffs.size() && i < most; ++i) {
        const ReuseDiff& d = r.reuse_diffs[i];
        out += cat("  prepared differently: op ", d.op_index, " (", d.op, ", a ", d.shape, " batch",
                   d.before.empty() ? "" : cat(", after ", d.before), "): the engine reused ", d.engine.reused, ", built ",
                   d.engine.built, ", rebound ", d.engine.rebound, "; the peer reused ", d.peer.reused, ", built ",
                   d.peer.built, ", rebound ", d.peer.rebound, "\n");
    }
    const std::uint64_t all = r.stats.reuse_diffs();
    if (all > most && !r.reuse_diffs.empty())
        out += cat("  ... ", all - std::min<std::uint64_t>(all, most), " more such calls",
                   all > r.reuse_diffs.size() ? cat(" (a run keeps the first ", r.reuse_diffs.size(), ")") : "", "\n");
    return out;
}

namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep) {
    std::string out;
    for (const std::string& item : items) out += cat(out.empty() ? "" : sep, item);
    return out;
}

}  // namespace

std::string text_report(const RunResult& r) {
    std::string out = cat("seed ", r.config.seed, ", ", r.ops.size(), " of ", r.steps, " ops\n", r.config.describe(),
                          "\n", r.oracles.describe(), "\n");
    out += stats_rows(r.stats, r.oracles);
    out += reuse_diff_lines(r, 10);
    if (!r.ended_early.empty()) out += cat("ended early: ", r.ended_early, "\n");
    if (r.verdict == Verdict::pass) return out + "verdict: PASS\n";
    const std::string steer = r.steered_past.empty() ? "" : cat(" --steer ", join(r.steered_past, ","));
    return out + failure_line(r) + cat("\n  reproduce: ", reproduce_command(r.config, r.steps), steer, "\n");
}

namespace {

// One seed's run; an engine that cannot be created for its config is the
// seed's engine error.
RunResult run_seed(const SimConfig& config, int steps) {
    RunResult r;
    try {
        r = run_generated(config, steps);
    } catch (const Error& e) {
        r = RunResult{config, steps, {}, {}, {}, Verdict::engine_error, Failure{0, "create", Oracle::engine, e.what()}};
    }
    r.ops.clear();
    return r;
}

// A seed that met a known finding with a steer runs again around it, the
// runs' stats added up, until it passes, fails otherwise, or meets a
// finding it was already steered past (or without a steer).
// A steer that would set a setting the user fixed (--params) is not taken:
// the swarm runs what it was asked to.
bool user_fixed(const KnownFinding& f, const std::string& user_params) {
    for (const std::string& kv : abi::split_list(f.steer_params.c_str()))
        for (const std::string& fixed : abi::split_list(user_params.c_str()))
            if (kv.substr(0, kv.find('=')) == fixed.substr(0, fixed.find('='))) return true;
    return false;
}

void steer_past_known(RunResult& r, const KnownFindings& known, int steps, const std::string& user_params) {
    RunStats judged;
    std::vector<std::string> past;
    SimConfig config = r.config;
    for (int n = 0; n < kMaxSteers; ++n) {
        const KnownFinding* f = known.match(r);
        if (!f || !f->steerable() || user_fixed(*f, user_params) ||
            std::find(past.begin(), past.end(), f->id) != past.end())
            break;
        past.push_back(f->id);
        judged.add(r.stats);
        config = steered(config, *f);
        r = run_seed(config, steps);
    }
    r.stats.add(judged);
    r.steered_past = std::move(past);
}

}  // namespace

SwarmResult run_swarm(const SwarmOptions& o,
                                 const std::function<void(std::size_t, std::size_t)>& progress) {
    const std::size_t n = std::size_t(o.last - o.first) + 1;
    const std::uint32_t capabilities = choice_capabilities(o.engine);
    // A bad setting or fault name is the user's input, refused (Error) before
    // any seed runs, not reported as an engine error on every seed.
    { const Simulator probe(draw_config(o.first, o.engine, o.model, capabilities)); }
    const KnownFindings known = known_findings_for(o.engine.engine, o.known_findings);
    SwarmResult out;
    out.known_path = known.path;
    out.seeds.resize(n);
    std::atomic<std::size_t> stop{n};  // the first seed (index) with a new failure, under stop_at_new_failure
    run_indexed(
        n, o.jobs,
        [&](std::size_t i) {
            if (i > stop.load()) return false;
            out.seeds[i] = run_seed(draw_config(o.first + i, o.engine, o.model, capabilities), o.steps);
            if (o.steer) steer_past_known(out.seeds[i], known, o.steps, o.engine.params);
            const bool failed = out.seeds[i].verdict != Verdict::pass;
            if (o.stop_at_new_failure && failed && !known.match(out.seeds[i]))
                for (std::size_t first = stop.load(); i < first && !stop.compare_exchange_weak(first, i);) {}
            return failed;
        },
        progress);
    if (stop.load() < n) out.seeds.resize(stop.load() + 1);
    for (RunResult& s : out.seeds) {
        out.total.add(s.stats);
        const KnownFinding* f = known.match(s);
        const bool fresh = s.verdict != Verdict::pass && !f;
        // A seed steered past a known finding met it: not a pass, even where its last run passed.
        out.failures += s.verdict != Verdict::pass || !s.steered_past.empty();
        s.known_finding = f ? f->id : fresh || s.steered_past.empty() ? "" : s.steered_past.front();
        out.known += !s.known_finding.empty() && !fresh;
        out.steered += !s.steered_past.empty();
    }
    out.unreproduced = unreproduced(known);
    out.oracles = out.seeds.front().oracles;  // the same engine and capabilities for every seed
    if (o.require_terms) {
        for (const auto& [name, t] : out.total.terms)
            if (!t.exercised()) out.unexercised.push_back(name);
        if (out.total.terms.empty()) out.unexercised.push_back("(the engine has no rule naming the terms)");
    }
    return out;
}

namespace {

// "cvec-x 3, lora-y 1 (file)", or the file alone when none matched.
std::string known_counts(const SwarmResult& r) {
    std::map<std::string, std::size_t> by_id;
    for (const RunResult& s : r.seeds) {
        for (const std::string& id : s.steered_past) ++by_id[id];
        const bool counted = std::find(s.steered_past.begin(), s.steered_past.end(), s.known_finding) != s.steered_past.end();
        if (!s.known_finding.empty() && !counted) ++by_id[s.known_finding];
    }
    std::string out;
    for (const auto& [id, n] : by_id) out += cat(out.empty() ? "" : ", ", id, " ", n);
    return cat(out.empty() ? "none seen" : out, " (", r.known_path, ")");
}

}  // namespace

std::string swarm_table(const SwarmResult& r, const SwarmOptions& o) {
    std::string out = cat("results over seeds ", o.first, "..", o.last, " on engine ", o.engine.engine, ":\n",
                          r.oracles.describe(), "\n");
    out += table_row("seeds", cat(r.seeds.size(), " (", r.failures, " failed",
                                  r.known_path.empty() ? "" : cat(", ", r.known, " of them known findings"), ")"));
    out += stats_rows(r.total, r.oracles);
    if (!r.known_path.empty()) out += table_row("known findings", known_counts(r));
    if (!r.known_path.empty())
        out += table_row("steered past a known finding",
                         o.steer ? cat(r.steered, " seeds (each run again around the finding's precondition, the rest "
                                                  "of it judged)")
                                 : std::string("off (--no-steer: a seed stops at its first known finding)"));
    out += table_row("ops judged per 1000 seeds",
                     cat(r.seeds.empty() ? 0 : r.total.ops_run * 1000 / r.seeds.size()));
    for (const RunResult& s : r.seeds) {
        if (s.verdict == Verdict::pass && s.steered_past.empty()) continue;
        const std::string steer = s.steered_past.empty() ? "" : cat(" --steer ", join(s.steered_past, ","));
        const std::string what = s.verdict == Verdict::pass
                                     ? cat("steered past ", join(s.steered_past, ", "), ", the rest passed")
                                     : failure_line(s).substr(std::string("verdict: FAIL ").size());
        out += cat(s.known_finding.empty() ? "FAIL" : cat("KNOWN (", s.known_finding, ")"), " seed ", s.config.seed,
                   s.steered_past.empty() || s.verdict == Verdict::pass ? "" : cat(" (steered past ", join(s.steered_past, ", "), ")"),
                   ": ", what, "\n  reproduce: ", reproduce_command(s.config, o.steps), steer, "\n");
    }
    for (const std::string& line : r.unreproduced) out += cat("FAIL ", line, "\n");
    for (const std::string& term : r.unexercised)
        out += cat("FAIL reuse term ", term, " never exercised (--require-terms): ",
                   r.total.terms.count(term) && r.total.terms.at(term).tied ? "no pair of plans where it changed"
                                                                             : "no pair of plans where it alone changed",
                   "\n");
    const std::size_t fresh = r.failures - r.known;
    if (!r.ok())
        return out + cat("swarm verdict: FAIL (", fresh, " seeds with new failures",
                         r.unreproduced.empty() ? "" : cat(", ", r.unreproduced.size(), " known findings not reproduced"),
                         r.unexercised.empty() ? "" : cat(", ", r.unexercised.size(), " reuse terms never exercised"),
                         ")\n");
    if (r.known)
        return out + cat("swarm verdict: NO NEW FINDINGS (not a pass: ", r.known,
                         " seeds fail with known findings of the engine, ", r.known_path, ")\n");
    return out + "swarm verdict: PASS\n";
}

}  // namespace kvweld::sim
