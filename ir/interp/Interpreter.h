// The reference interpreter: runs a model's graph IR op by op in plain C++. It is the
// oracle that optimizations and back ends are tested against, so it favours obvious
// correctness over speed, and it checks every result's shape against the type RDP gave it.
#pragma once

#include "ir/graph/Graph.h"
#include "runtime/Tensor.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace dnnc::interp {

using Binding = std::map<std::string, int64_t>;

// What a model needs besides its inputs.
struct ParamSpec {
  std::string name;
  ir::TensorType type;
  std::string init; // initializer text, e.g. "normal(0, 0.02)"; empty means the default
};
std::vector<ParamSpec> paramsOf(const ir::Graph &g);

// Runs one op some other way (compiled code) and returns true, or returns false to let
// the reference implementation run it. Control flow stays with the interpreter.
using OpRunner = std::function<bool(const ir::Op &, const std::vector<const rt::Tensor *> &, std::vector<rt::Tensor> &,
                                    const Binding &)>;

// Called with the tensors the interpreter is about to read on the host (a reference op's
// operands, a branch condition, loop operands, yielded or returned values), after which
// it may allocate and free host memory: a device that keeps results in memory of its
// own copies them back here.
using HostAccess = std::function<void(const std::vector<const rt::Tensor *> &)>;

class Interpreter {
public:
  explicit Interpreter(const ir::Graph &g, OpRunner runner = nullptr, HostAccess beforeHostAccess = nullptr)
      : graph_(g), runner_(std::move(runner)), beforeHostAccess_(std::move(beforeHostAccess)) {}
  // Binds dims from the inputs' shapes (and `preset`), checks ranges and the asserts
  // about input dims before anything runs, then runs the model. Throws rt::DataError for
  // bad inputs or a violated assert, InternalError when a result contradicts its type.
  std::vector<rt::Tensor> run(const std::vector<rt::Tensor> &inputs, const std::map<std::string, rt::Tensor> &params,
                              const Binding &preset = {});
  // Dims bound by the inputs (null: not given) and `preset`, checked against the inputs'
  // types and the dims' ranges; what run() starts from.
  Binding bindInputs(const std::vector<const rt::Tensor *> &inputs, Binding preset) const;
  // Checks, before anything is allocated, the asserts about input dims and the sizes of
  // the ops that always run: a failed assert, a negative dim, a dim past 64 bits or a
  // tensor past the tensor-bytes limit is a DataError naming the op (run() calls it; other
  // sizes are checked as their ops run).
  void checkBinding(const Binding &b);
  const Binding &binding() const { return binding_; }
  size_t opsExecuted() const { return opsExecuted_; }

private:
  const ir::Graph &graph_;
  OpRunner runner_;
  HostAccess beforeHostAccess_;
  Binding binding_;
  size_t opsExecuted_ = 0;
  std::unordered_set<const ir::Value *> sizesChecked_; // under sizesCheckedFor_
  std::optional<Binding> sizesCheckedFor_;
};

// The shape an input must have under a binding, or an empty optional for each unbound
// dim; used to make random inputs.
std::vector<std::optional<int64_t>> expectedShape(const ir::TensorType &t, const Binding &b);

// A tensor of `type` (dims evaluated under `b`) filled by its initializer text
// ("normal(0, 0.02)", "uniform(a, b)", "zeros()", "ones()", "full(v)"; default: normal
// for floats, zeros for integers), from `seed`.
rt::Tensor initialize(const ir::TensorType &type, const std::string &init, const Binding &b, uint64_t seed);

} // namespace dnnc::interp
