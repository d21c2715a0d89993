// One visitor from several lambdas, for std::visit over a variant of calls
// or ops: each lambda takes one alternative, a generic one the rest.
#pragma once

namespace kvweld {

template <class... F>
struct Overloaded : F... {
    using F::operator()...;
};
// Spelled out: clang 14 (the fuzz build) does not deduce an aggregate's arguments.
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace kvweld
