// One name table per enum: to_string, parsing and the list of names in help
// texts and errors all come from the same table, so a new enumerator is
// named in exactly one place.
#pragma once

#include "util/cat.hpp"
#include "util/error.hpp"

#include <array>
#include <string>
#include <string_view>

namespace kvweld {

template <class E>
struct EnumName {
    E value;
    std::string_view name;
};

template <class E, std::size_t N>
using NameTable = std::array<EnumName<E>, N>;

template <class E, std::size_t N>
constexpr std::string_view name_in(const NameTable<E, N>& table, E value) {
    for (const EnumName<E>& e : table)
        if (e.value == value) return e.name;
    return "?";
}

// "a, b or c"
template <class E, std::size_t N>
std::string names_in(const NameTable<E, N>& table) {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) out += cat(i == 0 ? "" : i + 1 == N ? " or " : ", ", table[i].name);
    return out;
}

// Throws Error naming `what`, the text and the known names.
template <class E, std::size_t N>
E parse_in(const NameTable<E, N>& table, std::string_view text, std::string_view what) {
    for (const EnumName<E>& e : table)
        if (e.name == text) return e.value;
    throw Error(cat("unknown ", what, " '", text, "': expected ", names_in(table)));
}

}  // namespace kvweld
