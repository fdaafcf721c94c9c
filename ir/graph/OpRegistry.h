// The one operator registry: per op its spelling, shape class, dtype and shape rules,
// fusion pattern, placement, flags, gradient slot, error verb, builtin signature and, for
// the user's documentation, its semantics and NumPy/PyTorch equivalents (ir/graph/Ops.def
// is the list). Phases read these facts here, never by their own switch.
#pragma once

#include "base/Diagnostics.h"
#include "ir/graph/Graph.h"
#include "ir/sym/Analyzer.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::ir {

enum class DTypeRule { Same, Numeric, Float, Compare, Logical, Where, I64, First, Attr, None };

// How an op fuses, in TVM's OpPatternKind vocabulary. Elementwise: result element i reads
// element i of its one operand; Broadcast: the same over NumPy-broadcast operands;
// Injective: each result element reads one operand element through an index map;
// Reduction: reduces (or normalizes) over axes; OutFusable: elementwise consumers may
// join it as its epilogue (the GEMM); Opaque: fuses with nothing.
enum class OpPattern { Elementwise, Broadcast, Injective, Reduction, OutFusable, Opaque };

// Where an op runs: Kernel (lowered to a kernel), Host (the runtime runs it on the host,
// it binds fresh dims or reads data), Structural (sources and control flow: no work).
enum class Placement { Kernel, Host, Structural };

// Per-op flags, a bitmask (in their own namespace: Ops.def spells them bare).
namespace opflag {
enum OpFlag : unsigned {
  Fill = 1u << 0,      // no operands; joins any fused group as a producer, never a root
  ReadsIdx = 1u << 1,  // reads index values from its operands after the first (the host checks them)
  ParamView = 1u << 2, // may be passed on as a view of a parameter (see isParamView)
  InPlace = 1u << 3,   // its result may take the bytes of an equally sized operand that dies there
};
} // namespace opflag
using opflag::OpFlag;

// An op's gradient rule (ir/graph/GradRules.h): given the op and the gradients of its
// results (null where a result has none), it emits the backward ops through the autodiff
// pass's GradContext and returns one gradient per operand (null where none flows).
struct GradContext;
using GradRule = std::vector<Value *> (*)(GradContext &ctx, const Op &op, const std::vector<Value *> &resultGrads);

// One parameter of a builtin's signature.
struct ParamSpec {
  enum class Kind { Tensor, TensorList, Int, IntList, ValueList, Value, Float, Bool, DType };
  std::string name;
  Kind kind;
  std::optional<std::string> defaultText; // "none" means: absent unless given
};

// A shape or dtype rule's complaint; sema turns it into a located diagnostic and adds a
// note for each blamed operand (where that operand got the named dim).
struct RuleError {
  DiagKind kind;
  std::string message;
  std::vector<std::pair<int, sym::ExprRef>> blame; // operand index, its offending dim
  std::string suggestion;                          // e.g. an `assert` to add
};

struct RuleContext {
  const Op &op;
  const sym::Analyzer &analyzer;
  std::function<sym::ExprRef(const std::string &hint)> freshDim;

  const TensorType &in(size_t i) const { return op.operands.at(i)->type; }
  size_t numInputs() const { return op.operands.size(); }
  bool has(const std::string &k) const { return op.has(k); }
  int64_t intAttr(const std::string &k) const;
  sym::ExprRef dimAttr(const std::string &k) const;
  const DimList &listAttr(const std::string &k) const { return op.get<DimList>(k); }
  // Normalizes a possibly negative axis against `rank` (error when out of range).
  size_t axis(int64_t a, size_t rank, const std::string &what = "axis") const;
  // The axis attribute `k` (a list of axes for axisListAttr) checked and normalized
  // against `rank`; the normalized value is recorded in `normalizedAxes`, which sema
  // writes back, so every axis attribute is non-negative after sema.
  size_t axisAttr(const std::string &k, size_t rank) const;
  std::vector<size_t> axisListAttr(const std::string &k, size_t rank) const;
  mutable std::map<std::string, Attr> normalizedAxes = {};
  [[noreturn]] void error(DiagKind kind, std::string message, std::vector<std::pair<int, sym::ExprRef>> blame = {},
                          std::string suggestion = "") const;
  // `a == b` must hold: proved, or a shape-mismatch / unprovable-equality error.
  void requireEqual(sym::ExprRef a, sym::ExprRef b, const std::string &context, int opA, int opB) const;
};

using ShapeRule = std::vector<TensorType> (*)(const RuleContext &ctx, DType resultDType);

struct OpInfo {
  OpKind kind;
  const char *spelling;
  ShapeClass shapeClass;
  DTypeRule dtypeRule;
  ShapeRule shapeRule; // null for ops sema types itself (params, control flow)
  OpPattern pattern;
  Placement placement;
  unsigned flags;       // OpFlag bits
  GradRule grad;        // null until autodiff
  const char *verb;     // "" for the default "apply 'spelling' to"
  std::vector<ParamSpec> signature;
  const char *semantics; // what it computes, for docs/builtins.md ("" for ops not called by name)
  const char *numpy;     // the NumPy (or SciPy) expression that computes the same
  const char *torch;     // the PyTorch one
  bool callable() const { return !signature.empty(); }
  bool has(OpFlag f) const { return (flags & f) != 0; }
};

const OpInfo &opInfo(OpKind k);
// Elementwise: result element i depends only on element i of each (broadcast) operand
// (pattern Elementwise or Broadcast).
bool isElementwise(OpKind k);
// Reductions over axes, softmax and log_softmax included (pattern Reduction).
bool isReduction(OpKind k);
// Injective at this use: pattern Injective and no index read from a run-time operand
// (a slice with run-time bounds has a run-time length).
bool isInjective(const Op &op);
// The op reads index values from its operands after the first at this use.
bool readsIndices(const Op &op);
// The floating-point operations `op` does, a dim expression: 2 per multiply-add of a
// matmul or conv2d, a fused group's sum of its members'; null for ops that do no such
// arithmetic (their cost is memory traffic). `dnnc run --profile` reports GF/s from it.
sym::ExprRef flopCount(const Op &op);
const OpInfo *findBuiltin(const std::string &spelling);
const std::vector<OpInfo> &allOps();
// What the error message says the op failed to do ("add", "multiply", ...).
std::string opVerb(OpKind k);

// Applies the op's dtype rule and then its shape rule; throws RuleError.
std::vector<TensorType> inferResultTypes(const RuleContext &ctx);

} // namespace dnnc::ir
