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
#include <vector>

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

// Given a carried value's type on entry and after one iteration of the body, says which
// axes vary across iterations.
std::vector<size_t> loopVariantAxes(const TensorType &entry, const TensorType &afterOne, const sym::Analyzer &an);

// The frontend's side of a loop's fixpoint: RDP chooses the types the carried values have
// inside the body, the frontend builds the body with them (its ops, names and fresh dims).
struct LoopBody {
  // Builds the body with the carried values typed `carried`, replacing the previous build,
  // and returns the types one iteration leaves them with, of the same dtypes and ranks
  // (a change of either is the frontend's error to report).
  std::function<std::vector<TensorType>(const std::vector<TensorType> &carried)> build;
  // The last build is superseded by the next one: forget what it recorded.
  std::function<void()> discardBuild;
  // An attempt at the fixpoint begins; an abandoned attempt's fresh dims are forgotten.
  std::function<void()> beginAttempt, abandonAttempt;
};

// The carried types a loop's body is built with, and what one iteration of it leaves.
struct LoopFixpoint {
  std::vector<TensorType> generic;
  std::vector<TensorType> afterOne;
};

// Carried types to a fixpoint: the body is built, axes whose dims change across an
// iteration become generic loop dims (fresh dims from `ctx`, bounded below by the entry
// size while the loop cannot shrink them), and the body is built again, for at most
// three widening passes and one last build. Axes that enter equal and grow by the same
// constant share one generic dim (a KV cache and the token list of a decoder); when the
// last build does not confirm a shared growth, the attempt is rolled back and redone
// with one generic dim per axis. Returns the last build's types (the caller keeps that build).
LoopFixpoint loopFixpoint(const std::vector<TensorType> &entry, const LoopBody &body, PropagationContext &ctx);

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
