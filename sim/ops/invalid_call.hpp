// The invalid op's calls (sim/ops/invalid.cpp), each defined in the file of
// the op it is a wrong form of (KVWELD_INVALID in sim/ops.hpp): a truncate
// past the length in truncate.cpp, a token outside the vocabulary in
// step.cpp, and so on. A variant that the engine's capabilities or the
// sequence's state rule out is nullopt.
#pragma once

#include "engine/model.hpp"
#include "targets/engine.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvweld::sim {

// `value` as a whole number in `text` (not the 1 of "12" or of "-1"): what
// a refusal must name (engine_abi.h).
bool names(const std::string& text, const std::string& value);

// One call that must be refused: what it is (for messages), the bad value
// the refusal must name, and how it is made on an engine (and on its twin).
struct InvalidCall {
    std::string what;
    std::string value;
    std::function<void(targets::Engine&)> run;
    // Or this, where the bad value is a shape: the tensor it is wrong in
    // (llama.cpp names the tensor, not its dimensions).
    std::string tensor = {};
    bool state_load = false;  // the rule is told of a refused state load (an engine may put the sequence back)
};

// What the variants are made from: the sequence the op picked and its
// request, the op's seed, and the facts of the run they read.
struct InvalidSite {
    int seq, len, capacity;  // the sequence, the positions it holds, its capacity
    std::uint64_t v;         // the op's seed
    int seqs;                // sequences open at once
    std::uint32_t capabilities;
    const ModelConfig& model;
    std::vector<int> free;   // the closed sequences
    // A decode of these pairs, after a pair the sequence could take (so a
    // batch is refused for its bad pair alone).
    std::function<void(targets::Engine&, std::vector<std::int32_t>, std::vector<std::int32_t>)> batch;
    std::function<std::size_t()> state_size;  // the size of the sequence's state, saved now
};

}  // namespace kvweld::sim
