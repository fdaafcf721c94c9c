// The reference interpreter: regions, control flow, dim binding and shape checking.
#include "ir/interp/Interpreter.h"

#include "base/Error.h"
#include "ir/graph/OpRegistry.h"
#include "ir/interp/RefOps.h"
#include "base/Limits.h"
#include "base/Size.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace dnnc::interp {
namespace {

using rt::Tensor;

class Run {
public:
  Run(size_t &count, const ir::BindingCheck &sizesChecked) : count_(count), sizesChecked_(sizesChecked) {}

  std::vector<const Tensor *> valuesOf(const std::vector<ir::Value *> &vs) const {
    std::vector<const Tensor *> out;
    for (const ir::Value *v : vs)
      out.push_back(&values.at(v));
    return out;
  }
  std::unordered_map<const ir::Value *, Tensor> values;

  void region(const ir::Region &r, Binding &b) {
    for (const ir::Op *op : r.ops)
      execute(*op, b);
  }

  void setResult(const ir::Op &op, const ir::Value *v, Tensor t, Binding &b) {
    ir::bindResult(op, *v, t, b);
    values[v] = std::move(t);
  }

  void execute(const ir::Op &op, Binding &b) {
    ++count_;
    switch (op.kind) {
    case ir::OpKind::Param: return; // bound before the run
    case ir::OpKind::AssertDims: return ir::checkAssert(op, b);
    case ir::OpKind::If: {
      const ir::Region &taken = *op.regions[values.at(op.operands[0]).get(0) != 0 ? 0 : 1];
      Binding inner = b;
      region(taken, inner);
      for (size_t k = 0; k < op.results.size(); ++k)
        setResult(op, op.results[k], values.at(taken.yields[k]), b);
      return;
    }
    case ir::OpKind::For:
    case ir::OpKind::While: return loop(op, b);
    default: break;
    }
    for (const ir::Value *r : op.results)
      if (!sizesChecked_.sizeChecked(r))
        ir::checkValueSize(op, *r, b);
    std::vector<const Tensor *> in;
    for (const ir::Value *v : op.operands)
      in.push_back(&values.at(v));
    std::vector<Tensor> out;
    ir::checkBeforeRunning(op, b); // the same error on every device, before any kernel runs
    if (op.kind == ir::OpKind::Fused) { // its ops, one by one
      const ir::Region &body = *op.regions[0];
      for (size_t k = 0; k < body.args.size(); ++k)
        values[body.args[k]] = *in[k];
      Binding inner = b;
      region(body, inner);
      for (const ir::Value *y : body.yields)
        out.push_back(values.at(y));
    } else {
      try {
        out = runRefOp(RefContext{op, in, b});
      } catch (const DataError &e) {
        ir::rethrowAt(op, e);
      }
    }
    for (size_t k = 0; k < out.size(); ++k)
      setResult(op, op.results[k], std::move(out[k]), b);
  }

  void loop(const ir::Op &op, Binding &b) {
    bool isFor = op.kind == ir::OpKind::For;
    const ir::Region &body = *op.regions.back();
    size_t carriedFrom = 0; // operands before the carried values: dynamic for-loop bounds
    int64_t lo = 0, hi = 0;
    if (isFor) {
      if (op.has("lo")) {
        lo = *sym::evaluate(op.get<sym::ExprRef>("lo"), b);
        hi = *sym::evaluate(op.get<sym::ExprRef>("hi"), b);
      } else {
        lo = values.at(op.operands[0]).getInt(0);
        hi = values.at(op.operands[1]).getInt(0);
        carriedFrom = 2;
      }
    }
    std::vector<Tensor> carried;
    for (size_t k = carriedFrom; k < op.operands.size(); ++k)
      carried.push_back(values.at(op.operands[k]));
    // Each iteration binds the loop-variant dims of the region's arguments afresh.
    auto enter = [&](const ir::Region &r, std::optional<int64_t> i, Binding &inner) {
      size_t a = 0;
      if (i) {
        Tensor t = Tensor::zeros(DType::I64, {});
        t.setInt(0, *i);
        values[r.args[a++]] = t;
      }
      for (const Tensor &t : carried) {
        std::string err = ir::unify(r.args[a]->type, t.shape, inner);
        if (!err.empty())
          throw InternalError(fmt::format("{}: a carried value no longer fits its loop type: {}", ir::opWhere(op), err));
        values[r.args[a++]] = t;
      }
    };
    auto iterate = [&](std::optional<int64_t> i) {
      Binding inner = b;
      enter(body, i, inner);
      region(body, inner);
      for (size_t k = 0; k < carried.size(); ++k)
        carried[k] = values.at(body.yields[k]);
    };
    if (isFor) {
      for (int64_t i = lo; i < hi; ++i)
        iterate(i);
    } else {
      const ir::Region &cond = *op.regions[0];
      int64_t maxIterations = limit(Limit::Iterations); // 0: no limit
      for (int64_t done = 0;; ++done) {
        Binding inner = b;
        enter(cond, std::nullopt, inner);
        region(cond, inner);
        if (values.at(cond.yields[0]).get(0) == 0)
          break;
        if (maxIterations > 0 && done >= maxIterations)
          throw DataError(fmt::format("{} ran {} iterations and its condition still holds (--max-iterations {})",
                                      ir::opWhere(op), done, maxIterations));
        iterate(std::nullopt);
      }
    }
    for (size_t k = 0; k < op.results.size(); ++k)
      setResult(op, op.results[k], carried[k], b);
  }

private:
  size_t &count_;
  const ir::BindingCheck &sizesChecked_;
};

} // namespace

std::vector<Tensor> Interpreter::run(const std::vector<Tensor> &inputs, const std::map<std::string, Tensor> &params,
                                     const Binding &preset) {
  std::vector<const Tensor *> given;
  for (const Tensor &t : inputs)
    given.push_back(&t);
  binding_ = ir::bindInputs(graph_, given, preset);
  bindingCheck_.check(graph_, binding_);
  opsExecuted_ = 0;
  Run run(opsExecuted_, bindingCheck_);
  // Inputs and params are read, never written: the run sees them in place (views), and
  // whatever it returns is copied out.
  auto inPlace = [](const Tensor &t) { return Tensor::view(t.dtype, t.shape, const_cast<uint8_t *>(t.data())); };
  for (size_t k = 0; k < inputs.size(); ++k)
    run.values[graph_.body.args[k]] = inPlace(inputs[k]);
  for (const ir::Op *op : graph_.body.ops) {
    if (op->kind != ir::OpKind::Param)
      continue;
    const std::string &name = op->get<std::string>("name");
    auto it = params.find(name);
    if (it == params.end())
      throw DataError(fmt::format("no value for param '{}'", name));
    run.setResult(*op, op->results[0], inPlace(it->second), binding_);
  }
  run.region(graph_.body, binding_);
  std::vector<Tensor> out;
  for (const ir::Value *y : graph_.body.yields)
    out.push_back(run.values.at(y));
  return out;
}

} // namespace dnnc::interp
