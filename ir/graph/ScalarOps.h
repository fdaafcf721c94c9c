// The scalar operations of elementwise ops as enums made from ScalarOps.def, for the two
// places that implement them (the reference ops and the kernel emitter).
//
// Contract: an implementation switches over UnaryOp / BinaryOp with no `default:`; the
// build makes -Wswitch an error, so a new entry in ScalarOps.def fails to compile until
// both sides give it a case.
#pragma once

#include "base/Error.h"
#include "ir/graph/Graph.h"

#include <cmath>
#include <optional>

namespace dnnc::ir {

enum class UnaryOp {
#define DNNC_UNARY_SCALAR(Name) Name,
#include "ir/graph/ScalarOps.def"
};

enum class BinaryOp {
#define DNNC_BINARY_SCALAR(Name, Class) Name,
#include "ir/graph/ScalarOps.def"
};

enum class BinaryClass { Arith, Compare, Logical };

// Float `%` as NumPy's np.mod and Python: the remainder of floor division, with the
// divisor's sign, a zero remainder too (0.0 % -1.0 is -0.0). For the reference ops and
// sema's folding of constants; the kernel emitter builds the same steps in IR.
inline double floorMod(double a, double b) {
  double r = std::fmod(a, b);
  if (r == 0)
    return std::copysign(0.0, b);
  return (r < 0) != (b < 0) ? r + b : r;
}

// Follows a switch that names every scalar op: only a value outside the enum gets here.
[[noreturn]] inline void unreachableScalarOp() { throw InternalError("a scalar op outside ScalarOps.def"); }

// The scalar operation of graph op `k`, or nullopt when `k` is not one.
inline std::optional<UnaryOp> asUnaryOp(OpKind k) {
  switch (k) {
#define DNNC_UNARY_SCALAR(Name)                                                                                        \
  case OpKind::Name: return UnaryOp::Name;
#include "ir/graph/ScalarOps.def"
  default: return std::nullopt; // most ops are not scalar functions
  }
}
inline std::optional<BinaryOp> asBinaryOp(OpKind k) {
  switch (k) {
#define DNNC_BINARY_SCALAR(Name, Class)                                                                                \
  case OpKind::Name: return BinaryOp::Name;
#include "ir/graph/ScalarOps.def"
  default: return std::nullopt;
  }
}

inline BinaryClass binaryClass(BinaryOp k) {
  switch (k) {
#define DNNC_BINARY_SCALAR(Name, Class)                                                                                \
  case BinaryOp::Name: return BinaryClass::Class;
#include "ir/graph/ScalarOps.def"
  }
  unreachableScalarOp();
}


} // namespace dnnc::ir
