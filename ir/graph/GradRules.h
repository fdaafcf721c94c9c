// Gradient rules: per op, the vector-Jacobian product the autodiff pass
// (ir/transforms/Autodiff.h) emits. Each rule is registered in Ops.def beside the op's
// shape rule (OpInfo::grad); a null rule means the op passes no gradient (integer and bool
// results, indices) or has none yet (gradSupport says which, for sema's diagnostic).
//
// A rule sees the forward op (its operands and results are the forward values, which stay
// alive for the backward pass) and the gradient of each result (null: none reaches it); it
// builds the backward ops through a GradContext and returns one gradient per operand, with
// that operand's type, or null where none flows (an index, a condition, a zero gradient).
#pragma once

#include "ir/graph/Graph.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::ir {

// How a rule adds ops to the backward pass: the autodiff pass implements it (types come
// from the registry's shape rules; ops go where the `grad` was).
struct GradContext {
  virtual ~GradContext() = default;
  virtual Value *emit(OpKind kind, std::vector<Value *> operands, std::map<std::string, Attr> attrs = {}) = 0;
  // A scalar constant of dtype `dt`.
  virtual Value *constant(double value, DType dt) = 0;
  // A scalar of dtype `dt` holding the dim expression `d` at run time.
  virtual Value *dimValue(sym::ExprRef d, DType dt) = 0;
  // Whether the pass needs the gradient of `v` (rules skip building the others).
  virtual bool wants(const Value *v) const = 0;
};

std::vector<Value *> unaryGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> binaryGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> selectGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> reduceGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> softmaxGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> matmulGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> movementGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> partsGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> gatherGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> indexGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> prodGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> convGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> poolGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> topkGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> dropoutGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);
std::vector<Value *> maskedSelectGrad(GradContext &c, const Op &op, const std::vector<Value *> &grads);

// Why `op` cannot pass a gradient to its float operands yet (nullopt: it can, or it passes
// none by nature: integer and bool results). Sema reports this as a [grad] diagnostic.
std::optional<std::string> gradUnsupported(const Op &op);

// The first op on a path from the sources to `target` that cannot pass its gradient, looking
// into the bodies of the control-flow ops on the path, and why (gradUnsupported).
struct GradBlock {
  const Op *op;
  std::string why;
};
std::optional<GradBlock> gradBlocker(const Region &region, const Value *target, const std::vector<const Value *> &sources);

// The values read inside op's regions that are defined outside it (a loop body reading a
// param), in first-use order: a control-flow op depends on them like on its operands.
std::vector<Value *> regionCaptures(const Op &op);
// What a gradient flows to from `op`: its operands, then (control flow) its captures.
std::vector<Value *> gradInputs(const Op &op);

// The ops of `region` on a path from any of `sources` to `target`, in program order: the
// ops a gradient of `target` flows back through. Values defined outside the region are
// leaves; a control-flow op is on the path through its operands or captures. `reached[i]` says whether sources[i] lies on such a path.
std::vector<Op *> gradPath(const Region &region, const Value *target, const std::vector<const Value *> &sources,
                           std::vector<bool> &reached);

} // namespace dnnc::ir
