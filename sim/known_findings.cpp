#include "sim/known_findings.hpp"

#include "util/cat.hpp"
#include "util/error.hpp"
#include "targets/registry.hpp"
#include "sim/json_field.hpp"
#include "sim/jsonl.hpp"
#include "targets/abi_lists.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

namespace kvweld::sim {

namespace {

constexpr const char* kFormat = "kvweld-known-findings";
constexpr int kVersion = 1;

KnownFinding finding_from_json(const nlohmann::json& j, const std::filesystem::path& folder) {
    KnownFinding f;
    f.id = json_field<std::string>(j, "id");
    f.verdict = verdict_from_string(json_field<std::string>(j, "class"));
    require(f.verdict != Verdict::pass, "finding '", f.id, "': class pass is not a failure");
    f.clause = json_field<std::string>(j, "clause");
    f.trace = (folder / json_field<std::string>(j, "trace")).string();
    f.source = json_field<std::string>(j, "source");
    f.explanation = json_field<std::string>(j, "explanation");
    f.patch = j.value("patch", "");
    f.repro_truth = j.value("repro_truth", "");
    if (j.contains("upstream")) f.upstream = upstream_from_json(j.at("upstream"), f.id);
    f.program = j.value("program", "");
    f.sheet = j.value("sheet", "");
    f.needs = j.value("needs", "");
    require(f.needs.empty() || (f.needs.find('=') != std::string::npos && f.needs.find(',') == std::string::npos),
            "finding '", f.id, "': 'needs' is one setting, key=value|value, not '", f.needs, "'");
    for (const std::string& also : j.value("also", std::vector<std::string>{})) {
        f.also.push_back(verdict_from_string(also));
        require(f.also.back() != Verdict::pass, "finding '", f.id, "': 'also' class pass is not a failure");
    }
    if (j.contains("steer")) {
        const nlohmann::json& steer = j.at("steer");
        require(steer.is_object(), "finding '", f.id, "': 'steer' must be an object");
        for (const std::string& op : steer.value("ops", std::vector<std::string>{})) {
            f.steer_ops.push_back(op_kind_from_string(op));
            require(f.steer_ops.back() != OpKind::admit && f.steer_ops.back() != OpKind::step, "finding '", f.id,
                    "': steer ops: '", op, "' cannot be left out (nothing is decoded without it)");
        }
        f.steer_params = steer.value("params", "");
        require(f.steerable(), "finding '", f.id, "': 'steer' names no ops and no params");
    }
    return f;
}

}  // namespace

bool KnownFinding::reachable(const std::string& params) const {
    if (needs.empty()) return true;
    const std::string key = needs.substr(0, needs.find('=')), values = "|" + needs.substr(needs.find('=') + 1) + "|";
    for (const std::string& kv : abi::split_list(params.c_str()))
        if (kv.substr(0, kv.find('=')) == key) return values.find("|" + kv.substr(kv.find('=') + 1) + "|") != std::string::npos;
    return false;
}

const KnownFinding* KnownFindings::match(const RunResult& r) const {
    if (r.verdict == Verdict::pass || !r.failure || r.failure->clause.empty()) return nullptr;
    for (const KnownFinding& f : findings)
        if ((f.verdict == r.verdict || std::find(f.also.begin(), f.also.end(), r.verdict) != f.also.end()) &&
            f.clause == r.failure->clause)
            return &f;
    return nullptr;
}

SimConfig steered(SimConfig c, const KnownFinding& f) {
    for (const OpKind k : f.steer_ops) c.weights[std::size_t(k)] = 0;
    if (f.steer_params.empty()) return c;
    // The steer's settings replace the drawn ones of the same name.
    std::vector<std::string> kept;
    const std::vector<std::string> steer = abi::split_list(f.steer_params.c_str());
    for (const std::string& kv : abi::split_list(c.engine.params.c_str())) {
        const std::string key = kv.substr(0, kv.find('='));
        if (std::none_of(steer.begin(), steer.end(), [&](const std::string& s) { return s.substr(0, s.find('=')) == key; }))
            kept.push_back(kv);
    }
    kept.insert(kept.end(), steer.begin(), steer.end());
    std::string params;
    for (const std::string& kv : kept) params += cat(params.empty() ? "" : ",", kv);
    c.engine.params = params;
    return c;
}

std::vector<const KnownFinding*> steers_named(const KnownFindings& known, const std::string& ids) {
    std::vector<const KnownFinding*> out;
    for (const std::string& id : abi::split_list(ids.c_str())) {
        const auto it = std::find_if(known.findings.begin(), known.findings.end(),
                                     [&](const KnownFinding& f) { return f.id == id; });
        require(it != known.findings.end(), "--steer: no known finding '", id, "' in ",
                known.path.empty() ? "(no known findings file)" : known.path);
        require(it->steerable(), "--steer: known finding '", id, "' has no steer (", known.path, ")");
        out.push_back(&*it);
    }
    return out;
}

KnownFindings load_known_findings(const std::string& path) {
    const std::string text = read_text_file(path, "known findings file");
    KnownFindings out;
    out.path = path;
    try {
        const nlohmann::json j = nlohmann::json::parse(text);
        require(j.is_object() && j.value("format", "") == kFormat, "not a known findings file (expected \"format\": \"",
                kFormat, "\")");
        const int version = json_field<int>(j, "version");
        require(version == kVersion, "version ", version, ": this build reads version ", kVersion);
        out.engine = json_field<std::string>(j, "engine");
        out.release = json_field<std::string>(j, "release");
        require(j.contains("findings") && j.at("findings").is_array(), "no 'findings' array");
        const auto folder = std::filesystem::path(path).parent_path();
        for (const nlohmann::json& f : j.at("findings")) out.findings.push_back(finding_from_json(f, folder));
    } catch (const nlohmann::json::exception& e) {
        throw Error(cat("known findings file ", path, ": ", e.what()));
    } catch (const Error& e) {
        throw Error(cat("known findings file ", path, ": ", e.what()));
    }
    return out;
}

KnownFindings known_findings_for(const std::string& engine, const std::string& choice) {
    if (choice == "none") return {};
    if (!choice.empty()) return load_known_findings(choice);
    const targets::EngineEntry* e = targets::engine_entry(engine);
    if (!e || !e->known_findings || !*e->known_findings) return {};
    // Another release (llamacpp@V) has its own file beside the pinned one's,
    // or none; V+fixes is V with its patched findings gone.
    if (std::string release = targets::named_release(engine); !release.empty()) {
        constexpr std::string_view kFixes = "+fixes";
        const bool fixed = release.ends_with(kFixes);
        if (fixed) release.resize(release.size() - kFixes.size());
        const std::filesystem::path own = std::filesystem::path(e->known_findings).parent_path() / (release + ".json");
        if (!std::filesystem::exists(own)) return {};
        KnownFindings known = load_known_findings(own.string());
        if (fixed) {
            std::erase_if(known.findings, [](const KnownFinding& f) { return !f.patch.empty(); });
            known.engine = engine;  // its traces replay on the fixed build
        }
        return known;
    }
    return load_known_findings(e->known_findings);
}

std::vector<std::string> unreproduced(const KnownFindings& known) {
    std::vector<std::string> out;
    for (const KnownFinding& f : known.findings) {
        Trace t = parse_trace(read_text_file(f.trace), f.trace);
        // A release's file may share another release's traces: they run on
        // the engine the file names (llamacpp@0.3.20).
        t.config.engine.engine = known.engine;
        const RunResult r = run_ops(t.config, t.ops, t.steps);
        if (known.match(r) == &f) continue;
        out.push_back(cat("known finding '", f.id, "' (", known.path, ") no longer reproduces: its trace ", f.trace,
                          " gave ", to_string(r.verdict),
                          r.failure && !r.failure->clause.empty() ? cat(" on clause ", r.failure->clause) : "",
                          " where it gave ", to_string(f.verdict), " on clause ", f.clause,
                          ": a fixed engine? remove the entry"));
    }
    return out;
}

}  // namespace kvweld::sim
