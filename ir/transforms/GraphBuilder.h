// Builds new ops into a graph the way sema does: each op typed by its registry rule as it
// is made (scalar constants and dim values typed directly). The autodiff pass and the
// training step build with it; it is the GradContext the gradient rules see.
#pragma once

#include "ir/graph/GradRules.h"
#include "ir/sym/Analyzer.h"

#include <unordered_set>

namespace dnnc::ir {

class GraphBuilder final : public GradContext {
public:
  GraphBuilder(Graph &g, const sym::Analyzer &an, SourceRange loc) : g_(g), an_(an), loc_(loc) {}

  // A new op with `kind`'s result count (split: one per part), typed by its rule; an op
  // that does not type is an InternalError (builders make only well-typed ops).
  Value *emit(OpKind kind, std::vector<Value *> operands, std::map<std::string, Attr> attrs = {}) override;
  Value *constant(double value, DType dt) override;
  Value *dimValue(sym::ExprRef d, DType dt) override;
  bool wants(const Value *v) const override { return wanted.count(v) != 0; }

  // For the autodiff pass's region ops, which it makes itself (sema types control flow,
  // not a rule): a builder for a nested region shares the graph, facts and location, and
  // a made op joins `built` through append.
  Graph &graph() const { return g_; }
  const sym::Analyzer &analyzer() const { return an_; }
  SourceRange loc() const { return loc_; }
  void append(Op *op) { built.push_back(op); }
  // A new dim known only by running (a while's trip count): named after `hint`, unique in
  // the graph, at least 0; the graph's ranges and this builder's facts learn it.
  sym::ExprRef freshDim(const std::string &hint);

  std::unordered_set<const Value *> wanted; // for gradient rules: the values whose gradients are needed
  std::vector<Op *> built;                  // every op made, in order
  // Where the differentiate pass records the first op of each backward span it builds
  // (the recompute pass's input); a nested region's builder shares its parent's.
  std::vector<const Op *> *backwardStarts = nullptr;
  // Where the differentiate pass records each loop of the grad's own region that it copied
  // to stash its iterations' inputs: (the forward loop, the copy). Nested builders leave it
  // null: a loop in a region the backward replays is a replay itself.
  std::vector<std::pair<const Op *, Op *>> *stashedLoops = nullptr;

private:
  Value *scalar(OpKind kind, std::map<std::string, Attr> attrs, DType dt);

  Graph &g_;
  sym::Analyzer an_;
  SourceRange loc_;
};

} // namespace dnnc::ir
