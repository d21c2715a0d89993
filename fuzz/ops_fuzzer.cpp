// bytes -> a seed (the swarm config) and an op sequence -> the simulator
// with every oracle on. A violation aborts with the oracle's message.
#include "fuzz/fuzz_faults.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const FaultSet faults = fuzz::faults_from_env();
    FuzzedDataProvider in(data, size);
    DrawOptions draw;
    draw.model = "micro";
    draw.faults = faults;
    SimConfig config = draw_config(in.ConsumeIntegral<std::uint16_t>(), draw);
    config.slots = in.ConsumeIntegralInRange(1, 4);
    ScopedFaults scoped(faults);
    Simulator sim(config);
    for (int i = 0; i < kMaxOps && in.remaining_bytes() > 0; ++i) {
        const Op op = next_op(in, config);
        if (sim.apply(op, static_cast<std::size_t>(i))) continue;
        const Failure& f = *sim.failure();
        std::fprintf(stderr, "ops_fuzzer: %s at op %zu (%s), %s oracle: %s\n",
                     std::string(to_string(sim.verdict())).c_str(), f.op_index, f.op.c_str(),
                     std::string(to_string(f.oracle)).c_str(), f.detail.c_str());
        std::abort();
    }
    return 0;
}
