// The properties in the kill matrix: under each engine fault that breaks
// the contract, RapidCheck must find a failing command sequence (it prints
// the shrunk sequence). spec_reject_off_by_one is a scheduler fault: the
// simulator's kill matrix covers it, these properties cannot see it.
#include "engine/faults.hpp"
#include "props/contract_model.hpp"

#include <gtest/gtest.h>

namespace kvweld::props {
namespace {

}  // namespace
}  // namespace kvweld::props

// Names the fault in test output instead of dumping its byte (found by ADL).
namespace kvweld {
void PrintTo(Fault f, std::ostream* os) { *os << to_string(f); }
}  // namespace kvweld

namespace kvweld::props {
namespace {

class PropertiesUnderFault : public ::testing::TestWithParam<Fault> {};

TEST_P(PropertiesUnderFault, FindACounterexample) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    FaultSet faults;
    faults.add(GetParam());
    ScopedFaults scoped(faults);
    std::printf("--- expecting a counterexample under %s:\n", std::string(to_string(GetParam())).c_str());
    const bool passed = rc::check(std::string("contract under ") + std::string(to_string(GetParam())),
                                  [] { check_contract(); });
    EXPECT_FALSE(passed) << "the properties did not notice " << to_string(GetParam());
}

std::vector<Fault> engine_faults() {
    std::vector<Fault> out;
    for (const FaultInfo& f : all_faults())
        if (f.fault != Fault::spec_reject_off_by_one) out.push_back(f.fault);
    return out;
}

INSTANTIATE_TEST_SUITE_P(EngineFaults, PropertiesUnderFault, ::testing::ValuesIn(engine_faults()),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace kvweld::props
