// The shrinker: a failing run's ops and config made smaller, its failure's
// identity kept (sim/run.hpp).
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

// f(args) on the op's typed arguments, whatever its kind.
template <class F>
bool on_args(Op& op, F&& f) {
    return std::visit([&](auto& args) -> bool { return f(args); }, op.args);
}

}  // namespace

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

}  // namespace kvweld::sim
