// Memory planning (after SoD²): every intermediate a kernel writes gets an offset in one
// arena, and the arena's size and every offset are dim expressions, planned once at
// compile time for every shape and evaluated by the runtime once per call.
//
// Contract:
// - Planned: results of ops that `producesBuffer` accepts, in the model's body and in
//   the bodies of `for` loops, whose byte sizes depend only on the model's input dims
//   (so they are known when a call starts). Values of the body whose sizes depend on dims
//   bound later (EDO results) are planned too, in a second, late arena that the runtime
//   sizes when it makes the first of them, after the sync point. Not planned (the runtime
//   allocates them as it goes): model outputs, values inside `if`/`while` regions, and
//   loop-variant sizes inside loops.
// - Lifetimes run over one linear order of the ops (nested bodies inside their loop's
//   span); a value used inside a loop lives to the loop's end; a loop body's yields live
//   to the end of the body.
// - Two planned buffers whose lifetimes overlap never overlap in the arena, for every
//   binding the dims' ranges allow: each buffer sits above every conflicting buffer
//   placed before it (offsets are max(...) expressions). The one exception is in-place
//   reuse: an elementwise op's result may take exactly the bytes of an operand of equal
//   size whose lifetime ends at that op (same offset, flagged inPlace).
// - Buffers are placed largest first, comparing sizes at a reference binding (each dim
//   at its range's upper bound, or kUnboundedDim without one): deterministic.
// - Model outputs are not planned; those that update a param or input in place
//   (Graph::updates) are listed as sharing its memory and not counted in outputBytes.
// - Results of `prepack` ops (weights in the GEMM's layout, ir/transforms/Prepack.h) are
//   kept: live over the whole call and placed first, at constant offsets below every
//   other buffer, so that the runtime keeps them in the arena from one call to the next
//   (whatever the dims, nothing else is placed there) and packs them only once.
#pragma once

#include "ir/graph/Graph.h"
#include "ir/sym/Analyzer.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::ir {

struct PlannedBuffer {
  const Value *value = nullptr;
  sym::ExprRef bytes = nullptr;  // its size
  sym::ExprRef offset = nullptr; // in the arena
  int first = 0, last = 0;       // lifetime: positions in the plan's op order, inclusive
  bool inPlace = false;          // shares an operand's bytes (elementwise)
  bool late = false;             // in the arena sized after the sync points (EDO dims)
  bool kept = false;             // a prepacked weight: kept between calls, at the arena's start
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers; // in op order
  sym::ExprRef arena = nullptr;       // bytes: max over buffers of offset + bytes
  sym::ExprRef lateArena = nullptr;   // the same for late buffers; null when there are none
  std::vector<const Op *> order;      // the linear op order lifetimes refer to
  std::vector<const Value *> unplanned; // intermediates the runtime allocates as it goes
  // Model outputs written over the memory of the param or input they update
  // (Graph::updates that the execution order made safe): (output, target). They take no
  // bytes of their own; `outputBytes` counts the other outputs only.
  std::vector<std::pair<const Value *, const Value *>> inPlaceOutputs;
  sym::ExprRef outputBytes = nullptr;
  const PlannedBuffer *find(const Value *v) const;
  // Bytes of every planned buffer added up (what allocating each separately would take),
  // and the most bytes live at once over the order (a lower bound for any arena), both
  // at `binding`.
  int64_t naiveBytes(const std::map<std::string, int64_t> &binding) const;
  int64_t liveLowerBound(const std::map<std::string, int64_t> &binding) const;
};

// The planner's linear order of a graph's ops (MemoryPlan::order): nested regions' ops
// inside their op's span, a fused op one position. Each op's first and last position (its
// regions' included) and its innermost enclosing for/while loop, whose body runs again
// and again; the memory profile (tools/dnnc/MemoryProfile.cpp) numbers ops the same way.
class OpSpans {
public:
  explicit OpSpans(const Region &body);
  const std::vector<const Op *> &order() const { return order_; }
  int begin(const Op *op) const { return spans_.at(op).begin; }
  int end(const Op *op) const { return spans_.at(op).end; }
  // How long a use by `user` keeps a value made by `def` (null: a model argument) alive
  // because of loops: to the end of the outermost loop around `user` but not around
  // `def` (its body reads the value again); -1 when there is none.
  int loopUseEnd(const Op *def, const Op *user) const;

private:
  struct Span {
    int begin = 0, end = 0;
    const Op *loop = nullptr;
  };
  void number(const Region &r, const Op *loop);
  std::vector<const Op *> order_;
  std::map<const Op *, Span> spans_;
};

// The size a dim without an upper bound takes when the planner compares sizes.
constexpr int64_t kUnboundedDim = 64;
// The binding the planners compare sizes at: each dim at its range's upper bound, or
// kUnboundedDim without one.
std::map<std::string, int64_t> referenceBinding(const Graph &g);

sym::Analyzer analyzerFor(const Graph &g);
MemoryPlan planMemory(const Graph &g, const std::function<bool(const Op &)> &producesBuffer);
// `dnnc emit --emit=plan`: buffers, lifetimes, offsets and the arena formula.
std::string print(const MemoryPlan &plan, const Graph &g);

} // namespace dnnc::ir
