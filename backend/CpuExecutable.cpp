// Compiling a model's ops for the CPU and running them under the interpreter's control flow.
#include "backend/CpuExecutable.h"

#include "backend/lower/Lower.h"
#include "frontend/Diagnostics.h"
#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

namespace dnnc::backend {

CpuExecutable::CpuExecutable(const ir::Graph &g)
    : graph_(g), interpreter_(g, [this](const ir::Op &op, const std::vector<const rt::Tensor *> &in,
                                        std::vector<rt::Tensor> &out, const interp::Binding &b) {
        return runOp(op, in, out, b);
      }) {
  std::function<void(const ir::Region &)> visit = [&](const ir::Region &r) {
    for (const ir::Op *op : r.ops) {
      for (const auto &sub : op->regions)
        visit(*sub);
      std::string name = fmt::format("k{}_{}", kernels_.size(), ir::opInfo(op->kind).spelling);
      if (auto k = lower::lowerOp(*op, name)) {
        Compiled c{std::move(*k), {}, nullptr};
        c.dims = c.kernel.dims();
        kernels_.emplace(op, std::move(c));
        order_.push_back(op);
      }
    }
  };
  visit(g.body);
  std::vector<const kir::Kernel *> all;
  for (const ir::Op *op : order_)
    all.push_back(&kernels_.at(op).kernel);
  module_ = CpuModule::compile(all);
  for (auto &[op, c] : kernels_)
    c.fn = module_->lookup(c.kernel.name);
}

std::string CpuExecutable::kernelsText() const {
  std::string out;
  for (const ir::Op *op : order_)
    out += kir::print(kernels_.at(op).kernel);
  return out;
}

bool CpuExecutable::runOp(const ir::Op &op, const std::vector<const rt::Tensor *> &in, std::vector<rt::Tensor> &out,
                          const interp::Binding &b) {
  auto it = kernels_.find(&op);
  if (it == kernels_.end())
    return false;
  const Compiled &c = it->second;
  auto eval = [&](sym::ExprRef e) {
    auto v = sym::evaluate(e, b);
    if (!v)
      throw InternalError(fmt::format("{}: dim {} is unbound at launch", c.kernel.name, e->str()));
    return *v;
  };
  // Checks the kernel cannot make itself: indices that come from data or from unprovable
  // static positions must lie inside their buffers.
  if (op.kind == ir::OpKind::Take || op.kind == ir::OpKind::Embedding) {
    size_t axis = 0;
    if (op.kind == ir::OpKind::Take) {
      int64_t a = eval(op.get<sym::ExprRef>("axis"));
      axis = static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(in[0]->shape.size()) : a);
    }
    int64_t d = in[0]->shape[axis];
    for (size_t k = 0; k < in[1]->numel(); ++k) {
      int64_t j = in[1]->getInt(k);
      if (j < -d || j >= d)
        throw rt::DataError(fmt::format("index {} is out of range for dim {} of {} (size {})", j, axis, in[0]->typeText(), d));
    }
  }
  if (op.kind == ir::OpKind::Index) {
    const auto &starts = op.get<ir::DimList>("starts"), &points = op.get<ir::DimList>("points");
    size_t operand = 1;
    for (size_t a = 0; a < points.size(); ++a)
      if (points[a]->asConst() == 1) {
        int64_t d = in[0]->shape[a];
        int64_t p = starts[a] ? eval(starts[a]) : in[operand++]->getInt(0);
        if (!starts[a] && p < 0)
          p += d;
        if (p < 0 || p >= d)
          throw rt::DataError(fmt::format("index {} is out of range for dim {} of {} (size {})", p, a, in[0]->typeText(), d));
      }
  }
  std::vector<uint8_t *> buffers;
  for (const rt::Tensor *t : in)
    buffers.push_back(const_cast<uint8_t *>(t->bytes.data()));
  for (const ir::Value *r : op.results) {
    std::vector<int64_t> shape;
    for (sym::ExprRef d : r->type.dims)
      shape.push_back(eval(d));
    out.push_back(rt::Tensor::zeros(r->type.dtype, shape));
  }
  for (rt::Tensor &t : out)
    buffers.push_back(t.bytes.data());
  std::vector<int64_t> dims;
  for (const std::string &n : c.dims)
    dims.push_back(eval(sym::var(n)));
  c.fn(buffers.data(), dims.data());
  ++launched_;
  return true;
}

} // namespace dnnc::backend
