// Rank and Dimension Propagation (RDP, after SoD²): the shape facts of the graph IR.
//
// Contract: forward, every op's result types come from its registry rule applied to its
// operands' types (sema calls inferOp as it builds each op, so types exist as soon as the
// op does); through `if`, branch types join (agreeing dims stay, differing dims become a
// fresh dim); through loops, carried types reach a fixpoint, with loop-variant dims made
// generic and affine growth (`T0 + c*trips`) recognized; backward, annotations, asserts and
// declared outputs pin fresh dims to known expressions (unifyDim) across the whole graph.
// Requires: operands typed. Guarantees: every value typed, dims in canonical form.
#pragma once

#include "ir/graph/OpRegistry.h"

#include <functional>
#include <optional>

namespace dnnc::ir {

struct PropagationContext {
  sym::Analyzer &analyzer;
  std::function<sym::ExprRef(const std::string &hint)> freshDim;
};

// Forward step for one op: sets its results' types and normalizes its axis attributes
// (throws RuleError on a bad op).
void inferOp(Op &op, PropagationContext &ctx);

// The type a value has after an `if`, given the type each branch gives it. Returns
// nullopt when dtype or rank differ (a control-flow error). `fresh` is set when a dim
// had to be generalized, which makes the if EDO for that value.
std::optional<TensorType> joinTypes(const TensorType &a, const TensorType &b, PropagationContext &ctx, bool &fresh);

// Loop-carried dims. Given a carried value's type on entry and after one iteration of
// the body, says which axes vary across iterations.
std::vector<size_t> loopVariantAxes(const TensorType &entry, const TensorType &afterOne, const sym::Analyzer &an);

// After the body ran with each variant axis typed as the generic dim `generic[axis]`,
// the type the loop leaves: `entry + c*trips` where the body adds a constant c per
// iteration, else a fresh dim (set `fresh`). `trips` is the trip count; when it is not
// known from shapes (a while loop, `tripsKnown` false) a size that uses it is EDO.
TensorType loopExitType(const TensorType &entry, const TensorType &generic, const TensorType &afterGeneric,
                        sym::ExprRef trips, bool tripsKnown, PropagationContext &ctx, bool &fresh);

// Backward step: the dim `freshVar` is known to equal `value`; rewrite every type in the
// graph (and in `extra`) accordingly.
void unifyDim(Graph &g, const std::string &freshVar, sym::ExprRef value, std::vector<TensorType *> extra = {});

// The check that every rule-typed op's result types still agree with its rule is
// ir::verify(graph, analyzer).

} // namespace dnnc::ir
