// bytes -> a seed (the swarm config) and an op sequence -> the simulator
// with every oracle its engine allows: kvweld's dense engine in process
// (three inputs in four, the white-box oracles on), or through the Engine
// interface its dense or its paged plugin (where this build made them).
// The fault switches in KVWELD_FUZZ_FAULTS that the engine lists are on.
// A violation aborts with the oracle's message.
#include "engine/cat.hpp"
#include "engines/abi_lists.hpp"
#include "engines/registry.hpp"
#include "sim/simulator.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

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
            op.max_new = in.ConsumeIntegralInRange(0, 8);
            op.pick2 = in.ConsumeIntegral<std::uint8_t>();
            op.recycle = in.ConsumeBool();
            break;
        case OpKind::step:
            for (int s = 0; s < c.seqs; ++s) op.wants.push_back(in.ConsumeIntegralInRange(0, 4));
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            op.last_only = in.ConsumeBool();
            break;
        case OpKind::truncate:
        case OpKind::preempt:
            op.length = in.ConsumeIntegral<std::uint8_t>();
            op.rewrite = in.ConsumeBool();
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case OpKind::fork:
            op.pick2 = in.ConsumeIntegral<std::uint8_t>();
            op.onto_open = in.ConsumeBool();
            break;
        case OpKind::reload:
            op.same_weights = in.ConsumeBool();
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case OpKind::swap_layer: op.layer = in.ConsumeIntegralInRange(0, c.model.n_layers - 1); break;
        case OpKind::invalid:
            op.pick2 = in.ConsumeIntegral<std::uint8_t>();
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            break;
        case OpKind::migrate: op.pick2 = in.ConsumeIntegral<std::uint8_t>(); break;
        case OpKind::lora:
            for (int a = 0; a < kLoraPool; ++a)
                if (in.ConsumeBool()) {
                    op.adapters.push_back(a);
                    op.scales.push_back(0.5f * float(in.ConsumeIntegralInRange(-2, 4)));
                }
            break;
        case OpKind::cvec:
            op.clear = in.ConsumeBool();
            op.seed = in.ConsumeIntegralInRange(1, 3);
            op.layer = in.ConsumeIntegralInRange(0, c.model.n_layers - 1);
            op.layer_end = in.ConsumeIntegralInRange(0, c.model.n_layers - 1);
            break;
        case OpKind::warmup: op.on = in.ConsumeBool(); break;
        case OpKind::shift:
            op.length = in.ConsumeIntegral<std::uint8_t>();
            op.pick2 = in.ConsumeIntegral<std::uint32_t>();
            op.twice = in.ConsumeBool();
            break;
        case OpKind::load:
            op.pick2 = in.ConsumeIntegral<std::uint8_t>();
            op.onto_open = in.ConsumeBool();
            break;
        case OpKind::steady:
            for (int s = 0; s < c.seqs; ++s) op.wants.push_back(in.ConsumeIntegralInRange(0, 3));
            op.seed = in.ConsumeIntegral<std::uint8_t>();
            op.length = in.ConsumeIntegralInRange(1, 8);
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

// Whether `engine` can run here: in process always; a plugin where the
// build put it (a fuzzing service that ships the fuzzer alone has no build tree).
bool available(const char* engine) {
    const engines::EngineEntry* e = engines::engine_entry(engine);
    return e && (e->in_process || (*e->plugin && std::filesystem::exists(e->plugin)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const bool here[3] = {available("inproc"), available("kvweld"), available("kvweld-paged")};
    FuzzedDataProvider in(data, size);
    const std::uint8_t which = in.ConsumeIntegral<std::uint8_t>();
    const int pick = which % 4 != 3 ? 0 : which % 8 == 7 ? 2 : 1;
    const char* engine = pick == 0 ? "inproc" : pick == 1 ? "kvweld" : "kvweld-paged";
    if (!here[pick]) return 0;
    const std::string listed_all = engines::engine_fault_list(engine);
    const char* env = std::getenv("KVWELD_FUZZ_FAULTS");
    std::string faults;
    for (const std::string& name : abi::split_list(env))
        if (abi::lists_fault(listed_all.c_str(), name)) faults += (faults.empty() ? "" : ",") + name;
    SimConfig c = draw_config(in.ConsumeIntegral<std::uint16_t>(), EngineChoice{engine, "", faults, 0, 0}, "micro",
                              engines::engine_capabilities(engine));
    c.seqs = in.ConsumeIntegralInRange(1, 4);
    if (pick == 2)  // the pool for these sequences, drawn anew
        c.engine.params = cat("block=", 1 << in.ConsumeIntegralInRange(0, 4), ",blocks=", in.ConsumeIntegralInRange(1, 16));
    Simulator sim(c);
    for (int i = 0; i < kMaxOps && in.remaining_bytes() > 0; ++i)
        if (!sim.apply(next_op(in, c), std::size_t(i))) report(sim.verdict(), *sim.failure(), engine);
    return 0;
}
