// See GraphBuilder.h.
#include "ir/transforms/GraphBuilder.h"

#include "base/Error.h"
#include "ir/graph/OpRegistry.h"
#include "ir/transforms/RankDimPropagation.h"

#include <fmt/format.h>

namespace dnnc::ir {

Value *GraphBuilder::emit(OpKind kind, std::vector<Value *> operands, std::map<std::string, Attr> attrs) {
  Op *op = g_.newOp(kind, loc_);
  op->operands = std::move(operands);
  op->attrs = std::move(attrs);
  const OpInfo &info = opInfo(kind);
  op->shapeClass = info.shapeClass;
  size_t results = kind == OpKind::Split ? op->get<DimList>("parts").size() : 1;
  for (size_t i = 0; i < results; ++i) {
    Value *v = g_.newValue({}, "", loc_);
    v->def = op;
    op->results.push_back(v);
  }
  PropagationContext ctx{an_, [&](const std::string &) -> sym::ExprRef {
                           throw InternalError(fmt::format("a built '{}' needs a fresh dim", info.spelling));
                         }};
  try {
    inferOp(*op, ctx);
  } catch (const RuleError &e) {
    throw InternalError(fmt::format("a built '{}' does not type: {}", info.spelling, e.message));
  }
  built.push_back(op);
  return op->results[0];
}

Value *GraphBuilder::constant(double value, DType dt) { return scalar(OpKind::Constant, {{"value", value}, {"dtype", dt}}, dt); }

Value *GraphBuilder::dimValue(sym::ExprRef d, DType dt) {
  Value *n = scalar(OpKind::DimValue, {{"value", d}, {"dtype", DType::I64}}, DType::I64);
  return emit(OpKind::Cast, {n}, {{"dtype", dt}});
}

sym::ExprRef GraphBuilder::freshDim(const std::string &hint) {
  std::string name = hint;
  for (int i = 2; g_.dimRanges.count(name); ++i)
    name = hint + std::to_string(i);
  g_.dimRanges[name] = {0, sym::Interval::kInf};
  an_.declare(name, 0);
  return sym::var(name);
}

Value *GraphBuilder::scalar(OpKind kind, std::map<std::string, Attr> attrs, DType dt) {
  Op *op = g_.newOp(kind, loc_);
  op->attrs = std::move(attrs);
  op->shapeClass = opInfo(kind).shapeClass;
  Value *v = g_.newValue({dt, {}}, "", loc_);
  v->def = op;
  op->results.push_back(v);
  built.push_back(op);
  return v;
}

} // namespace dnnc::ir
