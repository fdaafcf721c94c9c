// Execution-order planning: a topological order of each region's ops that lowers the peak
// of bytes live at once, for the memory planner to work from.
//
// Contract: the result is a valid order (every operand, including values used inside an
// op's nested regions, is made before its user; `assert_dims` stays a barrier that
// nothing moves across); it is deterministic; its peak, measured at the reference binding
// (each dim at its upper bound, or ir::kUnboundedDim without one), is never worse than
// program order's: when the greedy order is not better, program order is kept (with the
// update edges, the earliest ready op first).
// In-place updates (Graph::updates, ir/graph/Updates.h): the op writing an update waits
// for every other reader of its target's old value (write-after-read edges, which bind
// program order too); an update those edges cannot make safe is dropped from
// Graph::updates, and its output is then an ordinary one.
// Greedy rule: among ready ops, run the one that frees the most bytes net of what it
// allocates, ties in program order.
#pragma once

#include "ir/graph/Graph.h"

namespace dnnc::ir {

struct OrderStats {
  int regionsReordered = 0;
  int64_t peakBefore = 0, peakAfter = 0; // bytes, at the reference binding, summed over regions
};

OrderStats planExecutionOrder(Graph &g);

} // namespace dnnc::ir
