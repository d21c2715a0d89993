#include "sim/repro.hpp"

#include "targets/registry.hpp"
#include "sim/jsonl.hpp"

#include <filesystem>

namespace kvweld::sim {

namespace {

// Hands each op that runs and each call the engine is given to the writer.
// A save is published once it is made (it makes no call before it); every
// other call before it is made, so a call the engine refuses is written too.
class ReproRecorder final : public Observer {
public:
    explicit ReproRecorder(targets::ReproWriter& writer) : writer_(writer) {}
    void before_op(std::size_t index, const Op& op) override {
        writer_.op(int(index) + 2);  // trace line: the header is line 1
        if (op.kind() == OpKind::abort) writer_.abort(int(op.as<ops::Abort>().after));
    }
    void before_call(const targets::MemoryCall& call) override {
        if (!std::holds_alternative<targets::calls::Save>(call)) writer_.call(call);
    }
    void on_call(const targets::MemoryCall& call) override {
        if (std::holds_alternative<targets::calls::Save>(call)) writer_.call(call);
    }
    void before_decode(const Batch& batch) override { writer_.decode(pairs_of(batch)); }
    void on_aborted(const Batch& called, Decoded& kept) override { writer_.aborted(kept_lengths(called, kept.batch)); }

private:
    static std::vector<targets::ReproPair> pairs_of(const Batch& batch) {
        std::vector<targets::ReproPair> pairs;
        for (const Pair& p : batch.pairs) pairs.push_back({p.seq, p.token, p.pos, p.output});
        return pairs;
    }
    targets::ReproWriter& writer_;
};

}  // namespace

std::optional<KnownFinding> finding_of_trace(const std::string& trace_path, const std::string& engine) {
    namespace fs = std::filesystem;
    const fs::path trace = fs::weakly_canonical(trace_path);
    std::optional<KnownFinding> found;
    for (const fs::path& folder : {trace.parent_path(), trace.parent_path().parent_path()}) {
        if (!fs::is_directory(folder)) continue;
        for (const fs::directory_entry& file : fs::directory_iterator(folder)) {
            if (file.path().extension() != ".json") continue;
            KnownFindings known;
            try {
                known = load_known_findings(file.path().string());
            } catch (const Error&) {
                continue;  // another kind of JSON file
            }
            for (const KnownFinding& f : known.findings)
                if (fs::weakly_canonical(f.trace) == trace && (!found || known.engine == engine)) found = f;
        }
    }
    return found;
}

Repro write_repro(const std::string& trace_path, const std::string& truth, const std::string& command,
                  bool upstream_test) {
    const Trace t = parse_trace(read_text_file(trace_path), trace_path);
    const std::string& engine = t.config.engine.engine;
    const targets::EngineEntry* entry = targets::engine_entry(engine);
    require(entry && entry->repro, "repro: engine '", engine,
            "' has no reproducer writer (its registry row names none): only llamacpp's calls are written as its API");
    const std::optional<KnownFinding> finding = finding_of_trace(trace_path, engine);
    Repro out;
    out.truth = !truth.empty() ? truth : finding && !finding->repro_truth.empty() ? finding->repro_truth : "graph_reuse=0";
    out.title = finding ? cat("llama.cpp finding '", finding->id, "'") : cat("the trace ", trace_path);
    const targets::ReproSetup setup{&t.config.model, t.config.engine.params, t.config.n_ctx, t.config.seqs,
                                    out.title, command, targets::parse_repro_truth(out.truth), upstream_test};
    const std::unique_ptr<targets::ReproWriter> writer = entry->repro(setup);
    out.replay = run_ops(t.config, t.ops, t.steps, [&](Simulator& sim) {
        sim.insert_observer<ReproRecorder>(std::make_unique<ReproRecorder>(*writer));
    });
    out.source = writer->finish();
    out.call_lines = writer->call_lines();
    return out;
}

}  // namespace kvweld::sim
