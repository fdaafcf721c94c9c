// In-place updates (Graph::updates): an output written over the memory of the param or
// input it is the new value of (a training step's updated params and optimizer state).
//
// Contract: safeUpdates keeps an update only when writing its output over its target
// cannot change any value the graph computes, in the body's current op order: the output
// is made by one op of the body (its writer), is yielded once and has its target's dtype
// and dims; the target is not itself an output; no other update names the same output or
// target; the writer reads the target only at the element it writes (writesInPlace) or
// not at all; and every other op that reads the target or a view of it (viewsOf; also
// inside its regions) comes before the writer. The execution-order pass adds the edges that make the last hold
// (ir/transforms/ExecutionOrder.h); the runtime checks again, since it may run a graph
// that pass did not order.
#pragma once

#include "ir/graph/Graph.h"

#include <vector>

namespace dnnc::ir {

// Whether `op` reads `operand` only at the element of its result `result` that it writes
// there (an elementwise op, or a fused group of them on the operand's path, of the
// result's dims): then `result` may take `operand`'s memory.
bool writesInPlace(const Op &op, const Value *operand, const Value *result);

// `target` and the values of `body` that may be views of its memory (a param's slice
// w[l], which the runtime passes on without a copy, and views of those): reading any of
// them reads the target's old value.
std::vector<const Value *> viewsOf(const Region &body, const Value *target);

// The updates of g that are safe apart from op order (every condition above but the
// last), each with its writer.
std::vector<std::pair<Graph::Update, const Op *>> updateWriters(const Graph &g);

// The updates of g that are safe in its current order.
std::vector<Graph::Update> safeUpdates(const Graph &g);

} // namespace dnnc::ir
