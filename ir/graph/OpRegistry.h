// The one operator registry: per op its spelling, shape class, dtype rule, shape rule
// and builtin signature (ir/graph/Ops.def is the list).
#pragma once

#include "base/Diagnostics.h"
#include "ir/graph/Graph.h"
#include "ir/sym/Analyzer.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dnnc::ir {

enum class DTypeRule { Same, Float, Compare, Logical, Where, I64, First, Attr, None };

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
  std::vector<ParamSpec> signature;
  bool callable() const { return !signature.empty(); }
};

const OpInfo &opInfo(OpKind k);
// Elementwise: result element i depends only on element i of each (broadcast) operand.
bool isElementwise(OpKind k);
// Reductions over axes, softmax and log_softmax included.
bool isReduction(OpKind k);
const OpInfo *findBuiltin(const std::string &spelling);
const std::vector<OpInfo> &allOps();
// What the error message says the op failed to do ("add", "multiply", ...).
std::string opVerb(OpKind k);

// Applies the op's dtype rule and then its shape rule; throws RuleError.
std::vector<TensorType> inferResultTypes(const RuleContext &ctx);

} // namespace dnnc::ir
