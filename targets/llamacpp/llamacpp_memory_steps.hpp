// The llama.h memory calls each engine call is made of, as data: the one
// table the plugin runs (llamacpp_engine_plugin.cpp, run_steps) and the
// reproducer writer prints (llamacpp_repro.cpp, steps_text), so the two
// cannot drift apart. It names llama.h's functions without including
// llama.h: the writer is built where llama.cpp is not.
#pragma once

#include <cstdint>
#include <vector>

namespace kvweld::targets::llama_steps {

enum class Fn : std::uint8_t {
    seq_rm,   // llama_memory_seq_rm(mem, seq, p0, p1)
    seq_cp,   // llama_memory_seq_cp(mem, seq, dst, p0, p1)
    seq_add,  // llama_memory_seq_add(mem, seq, p0, p1, delta)
    clear,    // llama_memory_clear(mem, true)
    seq_keep, // llama_memory_seq_keep(mem, seq)
};

struct Step {
    Fn fn;
    int seq = -1, dst = -1;
    int p0 = -1, p1 = -1;  // -1, -1: every position
    int delta = 0;
    // seq_rm's answer is checked: false (a partial removal llama.cpp
    // refuses) is an error naming the range.
    bool checked = false;
};

// An open, a close and a clear empty the sequence.
inline std::vector<Step> empty(int seq) { return {{.fn = Fn::seq_rm, .seq = seq}}; }
// A rewind to `keep` positions.
inline std::vector<Step> truncate(int seq, int keep) {
    return {{.fn = Fn::seq_rm, .seq = seq, .p0 = keep, .checked = true}};
}
// dst emptied, then given src's positions.
inline std::vector<Step> copy(int src, int dst) {
    return {{.fn = Fn::seq_rm, .seq = dst}, {.fn = Fn::seq_cp, .seq = src, .dst = dst}};
}
inline std::vector<Step> clear_all() { return {{.fn = Fn::clear}}; }
// Every sequence but `seq` emptied.
inline std::vector<Step> keep(int seq) { return {{.fn = Fn::seq_keep, .seq = seq}}; }
// A context shift as llama-server makes one: [p0, p1) removed, the later
// positions moved down (llama.cpp re-rotates their keys at the next
// decode's memory update, its K-shift). Nothing where p0 == p1.
inline std::vector<Step> shift(int seq, int p0, int p1) {
    if (p0 == p1) return {};
    return {{.fn = Fn::seq_rm, .seq = seq, .p0 = p0, .p1 = p1, .checked = true},
            {.fn = Fn::seq_add, .seq = seq, .p0 = p1, .delta = p0 - p1}};
}

}  // namespace kvweld::targets::llama_steps
