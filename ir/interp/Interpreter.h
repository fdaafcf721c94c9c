// The reference interpreter: runs a model's graph IR op by op in plain C++. It is the
// oracle that optimizations and back ends are tested against, so it favours obvious
// correctness over speed, and it checks every result's shape against the type RDP gave it.
#pragma once

#include "ir/graph/Binding.h"
#include "ir/graph/Graph.h"
#include "base/Tensor.h"

#include <map>
#include <string>
#include <vector>

namespace dnnc::interp {

using ir::Binding;

class Interpreter {
public:
  explicit Interpreter(const ir::Graph &g) : graph_(g) {}
  // Binds dims from the inputs' shapes (and `preset`), checks ranges, the asserts about
  // input dims and the sizes of the ops that always run (ir/graph/Binding.h) before
  // anything runs, then runs the model. Throws DataError for bad inputs or a violated
  // assert, InternalError when a result contradicts its type.
  std::vector<rt::Tensor> run(const std::vector<rt::Tensor> &inputs, const std::map<std::string, rt::Tensor> &params,
                              const Binding &preset = {});
  const Binding &binding() const { return binding_; }
  size_t opsExecuted() const { return opsExecuted_; }

private:
  const ir::Graph &graph_;
  Binding binding_;
  size_t opsExecuted_ = 0;
  ir::BindingCheck bindingCheck_;
};

} // namespace dnnc::interp
