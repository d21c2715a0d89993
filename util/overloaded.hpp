// One visitor from several lambdas, for std::visit over a variant of calls
// or ops: each lambda takes one alternative. The alternatives a visitor
// does not care about are named in an Ignored<...> list, never absorbed by
// a generic lambda, so a new alternative is a compile error in every
// visitor until it is handled or named there.
#pragma once

namespace kvweld {

template <class... F>
struct Overloaded : F... {
    using F::operator()...;
};
// Spelled out: clang 14 (the fuzz build) does not deduce an aggregate's arguments.
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

// Does nothing for exactly the alternatives Ts (no conversions: the call
// and op alternatives are distinct structs).
template <class T>
struct IgnoredOne {
    void operator()(const T&) const {}
};
template <class... Ts>
struct Ignored : IgnoredOne<Ts>... {
    using IgnoredOne<Ts>::operator()...;
};

}  // namespace kvweld
