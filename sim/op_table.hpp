// The op table's generic face (sim/op_table.cpp; each kind's row is in sim/ops/<name>.cpp):
// which sequences an op of a kind may act on now, and one op drawn over an
// entropy source. The swarm's generator, the replay and the ops fuzzer use
// these and nothing else, so a new kind is drawn by all the moment its row
// exists.
#pragma once

#include "sim/entropy.hpp"
#include "sim/ops.hpp"

#include <vector>

namespace kvweld::sim {

class Simulator;

// Sequences an op of this kind may act on now ({0} for an op of the
// engine's that needs no sequence; empty: it cannot run now).
std::vector<int> eligible_for(const Simulator& sim, OpKind kind);
// An op of a kind that can act now, weighted by the run's config.
Op draw_op(const Simulator& sim, Entropy& entropy);

}  // namespace kvweld::sim
