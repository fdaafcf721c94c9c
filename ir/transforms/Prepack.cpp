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

// `w[l]` of a param w of rank 3 or more: points on its leading axes, its last two whole.
bool isParamSlice(const Value *v) {
  const Op *ix = v->def;
  return ix && ix->kind == OpKind::Index && v->type.rank() == 2 && ix->operands[0]->def &&
         ix->operands[0]->def->kind == OpKind::Param && IndexAttrs::of(*ix).isLeadingSlice(ix->operands[0]->type.dims);
}

// The param B reads and whether B is its transpose; null when B is neither.
std::pair<Value *, bool> paramOf(Value *b) {
  if (isParam(b))
    return {b, false};
  if (isParamSlice(b))
    return {b->def->operands[0], false};
  const Op *t = b->def;
  if (!t || t->kind != OpKind::Transpose || !isParam(t->operands[0]))
    return {nullptr, false};
  if (t->has("perm") && *t->get<DimList>("perm")[0]->asConst() != 1) // the identity
    return {nullptr, false};
  return {t->operands[0], true};
}

// The region that holds `op` (a `for` body for a slice w[l]).
Region *regionOf(Graph &g, const Op *op) {
  Region *found = nullptr;
  walkRegions(g.body, [&](Region &r) {
    if (std::find(r.ops.begin(), r.ops.end(), op) != r.ops.end())
      found = &r;
  });
  if (!found)
    throw InternalError("an op of the model is in none of its regions");
  return found;
}
} // namespace

int prepackWeights(Graph &g) {
  std::map<std::pair<Value *, bool>, Value *> packed;
  std::map<const Op *, Value *> packedSlices; // w[l] of w -> the same slice of w's packed copy
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
    if (!param || !std::all_of(param->type.dims.begin(), param->type.dims.end(), [](sym::ExprRef d) { return d->asConst(); }))
      continue;
    int64_t columns = *mm.operands[1]->type.dims[1]->asConst();
    if (columns > kNarrowColumns && columns < kPrepackPanel)
      continue;
    Value *&p = packed[{param, transposed}];
    if (!p) {
      Op *op = g.newOp(OpKind::Prepack, mm.loc);
      op->operands = {param};
      DimList perm;
      for (size_t a = 0; a < param->type.rank(); ++a)
        perm.push_back(sym::constant(static_cast<int64_t>(a)));
      if (transposed)
        std::swap(perm[0], perm[1]);
      op->attrs["perm"] = perm;
      TensorType type = param->type;
      if (transposed)
        std::swap(type.dims[0], type.dims[1]);
      p = g.newValue(type, param->name + ".packed", param->loc);
      p->def = op;
      op->results = {p};
      auto at = std::find(g.body.ops.begin(), g.body.ops.end(), param->def);
      if (at == g.body.ops.end())
        throw InternalError(fmt::format("param '{}' is not made in the model's body", param->name));
      g.body.ops.insert(at + 1, op);
    }
    if (param->type.rank() == 2) {
      mm.operands[1] = p;
    } else { // the same slice of the packed copy, made where the slice of the param is
      const Op *slice = mm.operands[1]->def;
      Value *&packedSlice = packedSlices[slice];
      if (!packedSlice) {
        Op *ix = g.newOp(OpKind::Index, slice->loc);
        ix->operands = slice->operands;
        ix->operands[0] = p;
        ix->attrs = slice->attrs;
        packedSlice = g.newValue(mm.operands[1]->type, mm.operands[1]->name, mm.operands[1]->loc);
        packedSlice->def = ix;
        ix->results = {packedSlice};
        Region &r = *regionOf(g, slice);
        r.ops.insert(std::find(r.ops.begin(), r.ops.end(), slice) + 1, ix);
      }
      mm.operands[1] = packedSlice;
    }
    ++rewritten;
  }
  // Transposes of params, and the slices this pass replaced, that no op reads any more (a
  // slice the model left unused stays: its index may be out of range, an error to report).
  // (Removing one never changes another's use count: none reads another.)
  auto uses = countUses(g.body);
  walkRegions(g.body, [&](Region &r) {
    r.ops.erase(std::remove_if(r.ops.begin(), r.ops.end(),
                               [&](const Op *op) {
                                 bool replaced = (op->kind == OpKind::Transpose && isParam(op->operands[0])) || packedSlices.count(op);
                                 return replaced && uses[op->results[0]] == 0;
                               }),
                r.ops.end());
  });
  return rewritten;
}

} // namespace dnnc::ir
