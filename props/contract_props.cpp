// The contract's properties, checked by RapidCheck over random command
// sequences (CI fixes the seed through RC_PARAMS):
//   1. every held-plan decode equals the reference
//   2. a check is Valid exactly when neither storage nor model changed
//   3. builds + rebinds equal the justified count
//   4. truncate_to never changes the id; clear/set_layer/construction always
//      do; ids are unique across every cache ever made
#include "props/contract_model.hpp"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

namespace kvweld::props {

RC_GTEST_PROP(ContractProps, HoldForEveryCommandSequence, ()) { check_contract(); }

}  // namespace kvweld::props
