// bytes -> a seed (the swarm config) and an op sequence -> a simulator with
// every oracle on: kvweld's own, or (one input in four) the serving
// simulator over kvweld's engine behind the Engine interface (its dense or
// its paged plugin, where this build made them). A violation aborts with
// the oracle's message.
#include "engine/cat.hpp"
#include "engines/abi_lists.hpp"
#include "engines/registry.hpp"
#include "fuzz/fuzz_faults.hpp"
#include "sim/report.hpp"
#include "sim/serve/serve_sim.hpp"
#include "sim/simulator.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <filesystem>
#include <cstdlib>

using namespace kvweld;
using namespace kvweld::sim;

namespace {

constexpr int kMaxOps = 12;  // faults show within a few ops; short inputs keep exec/s high

std::vector<int> tokens(FuzzedDataProvider& in, int max_count, int min_count, int vocab) {
    const int n = in.ConsumeIntegralInRange(min_count, max_count);
    std::vector<int> out;
    for (int i = 0; i < n; ++i) out.push_back(in.ConsumeIntegralInRange(0, vocab - 1));
    return out;
}

Op next_op(FuzzedDataProvider& in, const SimConfig& c) {
    Op op;
    op.kind = static_cast<OpKind>(in.ConsumeIntegralInRange(0, kOpKinds - 1));
    op.pick = in.ConsumeIntegral<std::uint8_t>();
    switch (op.kind) {
        case OpKind::admit:
            op.tokens = tokens(in, 4, 1, c.model.vocab);
            op.fresh = in.ConsumeBool();
            op.accept = in.ConsumeProbability<float>();
            op.max_new = in.ConsumeIntegralInRange(0, 8);
            op.pick2 = in.ConsumeIntegral<std::uint8_t>();
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case OpKind::decode: op.seed = in.ConsumeIntegral<std::uint8_t>(); break;
        case OpKind::spec:
            op.tokens = tokens(in, 3, 0, c.model.vocab);
            op.m = in.ConsumeIntegralInRange(0, static_cast<int>(op.tokens.size()));
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case OpKind::set_layer: op.layer = in.ConsumeIntegralInRange(0, c.model.n_layers - 1); break;
        case OpKind::truncate: op.length = in.ConsumeIntegral<std::uint8_t>(); break;
        case OpKind::reload:
            op.same_weights = in.ConsumeBool();
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case OpKind::migrate: op.pick2 = in.ConsumeIntegral<std::uint8_t>(); break;
        default: break;
    }
    return op;
}

ServeOp next_serve_op(FuzzedDataProvider& in, const ServeConfig& c) {
    ServeOp op;
    op.kind = static_cast<ServeOpKind>(in.ConsumeIntegralInRange(0, kServeOpKinds - 1));
    op.pick = in.ConsumeIntegral<std::uint8_t>();
    switch (op.kind) {
        case ServeOpKind::admit:
            op.tokens = tokens(in, 4, 1, c.model.vocab);
            op.max_new = in.ConsumeIntegralInRange(0, 8);
            break;
        case ServeOpKind::step:
            for (int s = 0; s < c.seqs; ++s) op.wants.push_back(in.ConsumeIntegralInRange(0, 4));
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case ServeOpKind::truncate:
        case ServeOpKind::preempt:
            op.length = in.ConsumeIntegral<std::uint8_t>();
            op.rewrite = in.ConsumeBool();
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case ServeOpKind::fork:
            op.pick2 = in.ConsumeIntegral<std::uint8_t>();
            op.onto_open = in.ConsumeBool();
            break;
        case ServeOpKind::reload:
            op.same_weights = in.ConsumeBool();
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case ServeOpKind::swap_layer: op.layer = in.ConsumeIntegralInRange(0, c.model.n_layers - 1); break;
        case ServeOpKind::invalid:
            op.pick2 = in.ConsumeIntegral<std::uint8_t>();
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        default: break;
    }
    return op;
}

[[noreturn]] void report(Verdict v, const Failure& f, const char* engine) {
    std::fprintf(stderr, "ops_fuzzer (%s): %s at op %zu (%s), %s oracle: %s\n", engine, std::string(to_string(v)).c_str(),
                 f.op_index, f.op.c_str(), std::string(to_string(f.oracle)).c_str(), f.detail.c_str());
    std::abort();
}

// Whether this build's plugin for `engine` is where the build put it (a
// fuzzing service that ships the fuzzer alone has no build tree).
bool plugin_here(const char* engine) {
    const engines::EngineEntry* e = engines::engine_entry(engine);
    return e && *e->plugin && std::filesystem::exists(e->plugin);
}

// The serving simulator over one of kvweld's plugins, with the fault
// switches (names) that plugin lists; nothing where the plugin is absent.
int serve_one(FuzzedDataProvider& in, const char* engine, const std::string& faults) {
    static const bool available[2] = {plugin_here("kvweld"), plugin_here("kvweld-paged")};
    if (!available[std::string(engine) == "kvweld-paged"]) return 0;
    const auto library = engines::engine_library(engine);
    std::string listed;
    for (const std::string& name : abi::split_list(faults.c_str()))
        if (abi::lists_fault(library->api().fault_names, name)) listed += (listed.empty() ? "" : ",") + name;
    ServeConfig c = draw_serve_config(in.ConsumeIntegral<std::uint16_t>(), EngineChoice{engine, "", listed, 0, 0},
                                      "micro", library->api().capabilities);
    c.seqs = in.ConsumeIntegralInRange(1, 4);
    if (std::string(engine) == "kvweld-paged")  // the pool for these sequences, drawn anew
        c.engine.params = cat("block=", 1 << in.ConsumeIntegralInRange(0, 4), ",blocks=", in.ConsumeIntegralInRange(1, 16));
    ServeSimulator sim(c);
    for (int i = 0; i < kMaxOps && in.remaining_bytes() > 0; ++i)
        if (!sim.apply(next_serve_op(in, c), std::size_t(i))) report(sim.verdict(), *sim.failure(), engine);
    return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const FaultSet faults = fuzz::faults_from_env();
    FuzzedDataProvider in(data, size);
    const std::uint8_t which = in.ConsumeIntegral<std::uint8_t>();
    if (which % 4 == 3) {
        const char* env = std::getenv("KVWELD_FUZZ_FAULTS");
        return serve_one(in, which % 8 == 7 ? "kvweld-paged" : "kvweld", env ? env : "");
    }
    DrawOptions draw;
    draw.model = "micro";
    draw.faults = faults;
    SimConfig config = draw_config(in.ConsumeIntegral<std::uint16_t>(), draw);
    config.slots = in.ConsumeIntegralInRange(1, 4);
    ScopedFaults scoped(faults);
    Simulator sim(config);
    for (int i = 0; i < kMaxOps && in.remaining_bytes() > 0; ++i) {
        const Op op = next_op(in, config);
        if (!sim.apply(op, static_cast<std::size_t>(i))) report(sim.verdict(), *sim.failure(), "kvweld in process");
    }
    return 0;
}
