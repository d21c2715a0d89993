// The properties in the kill matrix: under each engine fault that breaks
// the contract, RapidCheck must find a failing command sequence (it prints
// the shrunk sequence), and that sequence must break a property the fault
// should break: an exception, or a failure of an unrelated property, is
// not a kill. spec_reject_off_by_one is a scheduler fault: the simulator's
// kill matrix covers it, these properties cannot see it.
#include "engine/faults.hpp"
#include "props/contract_model.hpp"

#include <gtest/gtest.h>

#include <iostream>

// Names the fault in test output instead of dumping its byte (found by ADL).
namespace kvweld {
void PrintTo(Fault f, std::ostream* os) { *os << to_string(f); }
}  // namespace kvweld

namespace kvweld::props {
namespace {

struct Expected {
    Fault fault;
    std::vector<Prop> props;  // the shrunk counterexample breaks one of these
};

void PrintTo(const Expected& e, std::ostream* os) { *os << to_string(e.fault); }

// Which properties each fault breaks first, depending on the sequence
// RapidCheck shrinks to (a Check or a Decode right after the change).
const std::vector<Expected>& expected_kills() {
    using P = Prop;
    static const std::vector<Expected> table = {
        {Fault::geometry_only_key, {P::validity, P::weld, P::data, P::accounting}},
        {Fault::no_remint_on_clear, {P::ids}},
        {Fault::no_remint_on_set_layer, {P::ids}},
        {Fault::remint_on_truncate, {P::ids}},
        {Fault::model_id_not_in_key, {P::validity, P::data, P::accounting}},
        {Fault::weight_pointer_key, {P::validity, P::data, P::accounting}},
        {Fault::partial_rebind, {P::weld, P::data}},
        {Fault::offset_not_rebound, {P::data}},
        {Fault::mask_not_rebound, {P::data}},
        {Fault::always_stale, {P::validity, P::accounting}},
        {Fault::position_in_key, {P::validity, P::accounting}},
        {Fault::model_key_by_content, {P::validity, P::accounting}},
        {Fault::build_counted_as_kept, {P::accounting}},
        {Fault::refeed_write_skipped, {P::data}},
        {Fault::shift_rotation_skipped, {P::data}},
        {Fault::shift_delta_overwritten, {P::data}},
        {Fault::shift_remints_id, {P::ids}},
    };
    return table;
}

class PropertiesUnderFault : public ::testing::TestWithParam<Expected> {};

TEST_P(PropertiesUnderFault, BreakTheExpectedProperty) {
    if (!kFaultsCompiled) GTEST_SKIP() << "needs a KVWELD_FAULTS build";
    const Expected& e = GetParam();
    FaultSet faults;
    faults.add(e.fault);
    ScopedFaults scoped(faults);
    rc::detail::TestMetadata metadata;
    metadata.id = metadata.description = std::string("contract under ") + std::string(to_string(e.fault));
    const rc::detail::TestResult result = rc::detail::checkTestable([] { check_contract(); }, metadata);
    rc::detail::printResultMessage(result, std::cout);
    std::cout << "\n";
    rc::detail::FailureResult failure;
    ASSERT_TRUE(result.match(failure)) << "the properties did not notice " << to_string(e.fault);
    const std::optional<Prop> broken = prop_of_failure(failure.description);
    ASSERT_TRUE(broken.has_value()) << "the counterexample broke no named property: " << failure.description;
    EXPECT_NE(std::find(e.props.begin(), e.props.end(), *broken), e.props.end())
        << to_string(e.fault) << " broke the " << to_string(*broken) << " property, which it should not";
}

// Every engine fault of the table has an entry (a new fault must be added here).
TEST(PropertiesUnderFault, CoverEveryEngineFault) {
    for (const FaultInfo& f : all_faults()) {
        // The paged design's faults have their own properties (pool_props.cpp);
        // the scheduler's and the adapters' act on ops this model has not got
        // (their contract tests: engine/tests/adapters_test.cpp, and the kill matrix).
        if (f.in_process_only || f.adapters || f.design == FaultDesign::paged) continue;
        const auto& t = expected_kills();
        EXPECT_TRUE(std::any_of(t.begin(), t.end(), [&](const Expected& e) { return e.fault == f.fault; })) << f.name;
    }
}

INSTANTIATE_TEST_SUITE_P(EngineFaults, PropertiesUnderFault, ::testing::ValuesIn(expected_kills()),
                         [](const auto& info) { return std::string(to_string(info.param.fault)); });

}  // namespace
}  // namespace kvweld::props
