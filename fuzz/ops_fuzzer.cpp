// bytes -> a seed (the swarm config) and an op sequence (the op table's
// draws, sim/op_table.hpp, over the bytes) -> the simulator
// with every oracle its engine allows: kvweld's dense engine in process
// (three inputs in four, the white-box oracles on), or through the Engine
// interface its dense or its paged plugin (where this build made them).
// The fault switches in KVWELD_FUZZ_FAULTS that the engine lists are on.
// A violation aborts with the oracle's message.
#include "util/cat.hpp"
#include "targets/abi_lists.hpp"
#include "targets/registry.hpp"
#include "sim/op_table.hpp"
#include "sim/simulator.hpp"

#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

using namespace kvweld;
using namespace kvweld::sim;

namespace {

constexpr int kMaxOps = 12;  // faults show within a few ops; short inputs keep exec/s high

// The input's bytes as the op table's entropy (sim/entropy.hpp): the
// fuzzer draws its ops with the swarm's one draw per kind, each choice
// taking only the bytes its range needs. Once the bytes run out every
// draw is 0.
class BytesEntropy final : public Entropy {
public:
    explicit BytesEntropy(FuzzedDataProvider& in) : in_(in) {}
    std::uint32_t pick() override { return in_.ConsumeIntegral<std::uint8_t>(); }
    std::uint64_t seed() override { return in_.ConsumeIntegral<std::uint8_t>(); }
    std::uint64_t below(std::uint64_t n) override { return in_.ConsumeIntegralInRange<std::uint64_t>(0, n - 1); }
    bool chance(double p) override { return in_.ConsumeIntegral<std::uint8_t>() < p * 256.0; }

private:
    FuzzedDataProvider& in_;
};

[[noreturn]] void report(Verdict v, const Failure& f, const char* engine) {
    std::fprintf(stderr, "ops_fuzzer (%s): %s at op %zu (%s), %s oracle: %s\n", engine, std::string(to_string(v)).c_str(),
                 f.op_index, f.op.c_str(), std::string(to_string(f.oracle)).c_str(), f.detail.c_str());
    std::abort();
}

// Whether `engine` can run here: in process always; a plugin where the
// build put it (a fuzzing service that ships the fuzzer alone has no build tree).
bool available(const char* engine) {
    const targets::EngineEntry* e = targets::engine_entry(engine);
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
    const std::string listed_all = targets::engine_fault_list(engine);
    const char* env = std::getenv("KVWELD_FUZZ_FAULTS");
    std::string faults;
    for (const std::string& name : abi::split_list(env))
        if (abi::lists_fault(listed_all.c_str(), name)) faults += (faults.empty() ? "" : ",") + name;
    SimConfig c = draw_config(in.ConsumeIntegral<std::uint16_t>(), EngineChoice{engine, "", faults, 0, 0}, "micro",
                              targets::engine_capabilities(engine));
    c.seqs = in.ConsumeIntegralInRange(1, 4);
    if (pick == 2)  // the pool for these sequences, drawn anew
        c.engine.params = cat("block=", 1 << in.ConsumeIntegralInRange(0, 4), ",blocks=", in.ConsumeIntegralInRange(1, 16));
    Simulator sim(c);
    BytesEntropy entropy(in);
    for (int i = 0; i < kMaxOps && in.remaining_bytes() > 0; ++i)
        if (!sim.apply(draw_op(sim, entropy), std::size_t(i))) report(sim.verdict(), *sim.failure(), engine);
    return 0;
}
