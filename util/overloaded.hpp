// One visitor from several lambdas, for std::visit over a variant of calls
// or ops: each lambda takes one alternative, a generic one the rest.
#pragma once

namespace kvweld {

template <class... F>
struct Overloaded : F... {
    using F::operator()...;
};

}  // namespace kvweld
