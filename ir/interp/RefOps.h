// The reference implementation of every op of the registry (plain loops over doubles).
#pragma once

#include "ir/graph/Graph.h"
#include "runtime/Tensor.h"

#include <map>
#include <string>
#include <vector>

namespace dnnc::interp {

struct RefContext {
  const ir::Op &op;
  std::vector<const rt::Tensor *> in;
  const std::map<std::string, int64_t> &binding;

  int64_t dim(sym::ExprRef e) const;
  int64_t intAttr(const std::string &k) const;
  std::vector<int64_t> listAttr(const std::string &k) const;
  bool boolAttr(const std::string &k, bool dflt) const;
  double floatAttr(const std::string &k, double dflt) const;
};

// Runs one op that has no regions; returns its results.
std::vector<rt::Tensor> runRefOp(const RefContext &c);

// max, min, argmax and argmin of an empty axis have no value (NumPy: "zero-size array to
// reduction operation maximum which has no identity"): throws rt::DataError naming the op
// and its line when `op` (or an op of a fused group) is one whose reduced extent is 0 under
// `binding` while its result is not empty. Every device calls this before running an op.
void checkEmptyReduction(const ir::Op &op, const std::map<std::string, int64_t> &binding);
std::string emptyReductionMessage(const ir::Op &op, const std::string &operand);

} // namespace dnnc::interp
