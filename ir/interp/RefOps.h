// The reference implementation of every op of the registry (plain loops over doubles).
#pragma once

#include "ir/graph/Graph.h"
#include "base/Tensor.h"

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

} // namespace dnnc::interp
