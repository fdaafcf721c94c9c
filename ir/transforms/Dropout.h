// The dropout-mode pass (`dropout-mode`, first in every pipeline, before `differentiate`).
//
// Contract: a `dropout` op drops in training (spec training.md §11): in a training step
// (makeTrainStep marks its dropouts and gives them the step's RNG input) or in a model
// whose body takes a `grad` (this pass marks them; they draw with seed 0, step 0). Every
// dropout gets a `stream` attr, its ordinal in the model, so two dropouts of one step draw
// different masks, and the backward pass (which copies the attrs) redraws the forward
// mask. Dropouts not in training are the identity: this pass removes them, their uses
// reading x instead, so inference pays nothing for them.
#pragma once

#include "ir/graph/Graph.h"

#include <vector>

namespace dnnc::ir {

// Every dropout op of the model, nested regions included, in program order.
std::vector<Op *> dropoutOps(Graph &g);

// Marks each of `ops` as training, drawing with the key of `rng` (an i64[2] value: seed,
// step) when it is not null.
void trainDropouts(const std::vector<Op *> &ops, Value *rng);

void resolveDropout(Graph &g);

} // namespace dnnc::ir
