// Prepacking constant weights (see Prepack.h).
#include "ir/transforms/Prepack.h"

#include "base/Error.h"
#include "ir/graph/Walk.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace dnnc::ir {

namespace {
bool isParam(const Value *v) { return v->def && v->def->kind == OpKind::Param && v->type.rank() == 2; }

// The param B reads and whether B is its transpose; null when B is neither.
std::pair<Value *, bool> paramOf(Value *b) {
  if (isParam(b))
    return {b, false};
  const Op *t = b->def;
  if (!t || t->kind != OpKind::Transpose || !isParam(t->operands[0]))
    return {nullptr, false};
  if (t->has("perm") && *t->get<DimList>("perm")[0]->asConst() != 1) // the identity
    return {nullptr, false};
  return {t->operands[0], true};
}
} // namespace

int prepackWeights(Graph &g) {
  std::map<std::pair<Value *, bool>, Value *> packed;
  int rewritten = 0;
  std::vector<Op *> matmuls; // collected first: the rewrite inserts into the body
  walk(g.body, [&](Op &op) {
    if (op.kind == OpKind::Matmul)
      matmuls.push_back(&op);
  });
  for (Op *m : matmuls) {
    Op &mm = *m;
    bool f32 = mm.operands[0]->type.dtype == DType::F32 && mm.operands[1]->type.dtype == DType::F32 &&
               mm.results[0]->type.dtype == DType::F32;
    if (!f32 || mm.operands[1]->type.rank() != 2)
      continue;
    auto [param, transposed] = paramOf(mm.operands[1]);
    const DimList &dims = mm.operands[1]->type.dims;
    if (!param || !dims[0]->asConst() || !dims[1]->asConst() || *dims[1]->asConst() < kPrepackPanel)
      continue;
    Value *&p = packed[{param, transposed}];
    if (!p) {
      Op *op = g.newOp(OpKind::Prepack, mm.loc);
      op->operands = {param};
      op->attrs["perm"] = transposed ? DimList{sym::constant(1), sym::constant(0)} : DimList{sym::constant(0), sym::constant(1)};
      p = g.newValue(mm.operands[1]->type, param->name + ".packed", param->loc);
      p->def = op;
      op->results = {p};
      auto at = std::find(g.body.ops.begin(), g.body.ops.end(), param->def);
      if (at == g.body.ops.end())
        throw InternalError(fmt::format("param '{}' is not made in the model's body", param->name));
      g.body.ops.insert(at + 1, op);
    }
    mm.operands[1] = p;
    ++rewritten;
  }
  // Transposes of params that no op reads any more.
  walkRegions(g.body, [&](Region &r) {
    auto uses = countUses(g.body);
    r.ops.erase(std::remove_if(r.ops.begin(), r.ops.end(),
                               [&](const Op *op) {
                                 return op->kind == OpKind::Transpose && isParam(op->operands[0]) && uses[op->results[0]] == 0;
                               }),
                r.ops.end());
  });
  return rewritten;
}

} // namespace dnnc::ir
