// The differentiate pass's inside, shared by its two files: the reverse sweep over a list
// of ops (Autodiff.cpp) and the backward of the control-flow ops it meets
// (AutodiffRegions.cpp), which builds their bodies with that sweep again.
#pragma once

#include "ir/transforms/GraphBuilder.h"

#include <unordered_map>
#include <utility>
#include <vector>

namespace dnnc::ir {

// Forward value -> the gradient of y with respect to it, built so far.
using Adjoints = std::unordered_map<const Value *, Value *>;

// Adds `g` to the adjoint of `v` (the first gradient is taken as it is).
void accumulate(GraphBuilder &bw, Adjoints &adjoint, const Value *v, Value *g);

// Applies the gradient rules of `ops` (program order) in reverse: `adjoint` holds the
// seeds and gains the adjoint of every value bw.wants that they reach.
void backprop(GraphBuilder &bw, const std::vector<Op *> &ops, Adjoints &adjoint);

// The backward of an `if` or `for` (gradUnsupported allowed it): builds it into `bw` from
// the gradients of op's results (null: none) and returns the gradient contributions to the
// values it reads (gradInputs) that bw.wants.
std::vector<std::pair<const Value *, Value *>> regionGrad(GraphBuilder &bw, const Op &op, const std::vector<Value *> &resultGrads);

} // namespace dnnc::ir
