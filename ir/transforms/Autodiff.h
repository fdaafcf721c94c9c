// Reverse-mode automatic differentiation (the `differentiate` pass).
//
// Contract: every `grad` op (sema's grad(y, x...), y a float scalar) is replaced by the
// backward ops that compute dy/dx for each x, built from the registry's gradient rules
// (ir/graph/GradRules.h) over the forward ops on a path from the xs to y in grad's region,
// in reverse order, gradients of a value used twice summed; `if`, `for` and `while` on the
// path get backward control flow (ir/transforms/AutodiffRegions.h). The backward ops are ordinary
// graph IR, typed by the shape rules (symbolic dims), placed where the grad op was; the
// forward values they read stay alive until then. An x that y does not reach gets zeros
// (sema allowed it: allow_unused). Requires: sema's checks (gradBlocker finds nothing on
// the path). Guarantees: no `grad` op remains. Returns the first op of every backward span
// it built (in the grad's region, and in each backward loop body or branch after that
// region's replay of the forward): what the recompute pass splits regions at.
#pragma once

#include "ir/graph/Graph.h"

namespace dnnc::ir {

std::vector<const Op *> differentiate(Graph &g);

} // namespace dnnc::ir
