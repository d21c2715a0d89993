// A header's text reduced to the features one program uses, as syzkaller
// strips its executor's common code into each C reproducer: a block under
// `#if KVWELD_USES(A)` (or `KVWELD_USES(A) || KVWELD_USES(B)`) stays where
// the program uses one of them, and the directive lines go. The header
// itself compiles with every block in (it defines KVWELD_USES(f) as 1
// where nothing else did). Also dropped: `#pragma once`, quoted includes
// (the program carries their text itself), the KVWELD_USES default, and
// every comment that stands on a line of its own but a section title
// (`// ---- ...`), and every blank line but the one before a title: the
// header is where the reasons are read, and a program stays short. System
// includes are lifted out, so that a program names each once, at its top.
#pragma once

#include <set>
#include <string>
#include <string_view>

namespace kvweld::targets {

// The features the llama.cpp reproducers' prelude and llama_compat.hpp
// guard (a guard naming another is an Error).
inline const std::set<std::string>& repro_features() {
    static const std::set<std::string> all = {"LORA", "CVEC", "SAMPLER", "CHAIN_CLEAR", "EMBD", "STATE",
                                              "ABORT", "MOE", "WARMUP", "REUSE", "PLUGIN"};
    return all;
}

struct Stripped {
    std::set<std::string> includes;  // the `#include <...>` lines kept
    std::string text;                // the rest
};

// `text` with the blocks of unused features gone; an unbalanced or
// unknown guard, or an #else/#elif of one, throws Error naming the line.
Stripped strip_features(std::string_view text, const std::set<std::string>& uses);

}  // namespace kvweld::targets
