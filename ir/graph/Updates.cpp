// In-place updates (see Updates.h).
#include "ir/graph/Updates.h"

#include "ir/graph/OpRegistry.h"
#include "ir/graph/Walk.h"

#include <algorithm>
#include <map>

namespace dnnc::ir {

bool writesInPlace(const Op &op, const Value *operand, const Value *result) {
  if (operand->type.dims != result->type.dims)
    return false;
  auto at = std::find(op.operands.begin(), op.operands.end(), operand);
  if (at == op.operands.end() || !opInfo(op.kind).has(OpFlag::InPlace))
    return false;
  if (op.regions.empty())
    return true;
  const Region &body = *op.regions[0];
  // A fused GEMM writes the whole output block before its epilogue reads anything.
  if (std::any_of(body.ops.begin(), body.ops.end(), [](const Op *m) { return opInfo(m->kind).pattern == OpPattern::OutFusable; }))
    return false;
  // A fused op qualifies when everything between that operand and the result is in place
  // at the result's shape (reshapes of other operands do not matter).
  std::vector<const Value *> frontier{body.args[static_cast<size_t>(at - op.operands.begin())]};
  while (!frontier.empty()) {
    const Value *v = frontier.back();
    frontier.pop_back();
    for (const Op *user : body.ops)
      if (std::find(user->operands.begin(), user->operands.end(), v) != user->operands.end()) {
        if (!opInfo(user->kind).has(OpFlag::InPlace) || user->results[0]->type.dims != result->type.dims)
          return false;
        frontier.push_back(user->results[0]);
      }
  }
  return true;
}

std::vector<const Value *> viewsOf(const Region &body, const Value *target) {
  std::vector<const Value *> views{target};
  for (const Op *op : body.ops) // in order: a view of a view comes after it
    if (opInfo(op->kind).has(OpFlag::ParamView) && !op->operands.empty() &&
        std::find(views.begin(), views.end(), op->operands[0]) != views.end())
      views.insert(views.end(), op->results.begin(), op->results.end());
  return views;
}

namespace {
bool readsAny(const Op &op, const std::vector<const Value *> &values) {
  bool reads = false;
  forEachRead(op, [&](const Value *x) { reads = reads || std::find(values.begin(), values.end(), x) != values.end(); });
  return reads;
}
} // namespace

std::vector<std::pair<Graph::Update, const Op *>> updateWriters(const Graph &g) {
  const Region &body = g.body;
  std::map<const Value *, int> targets, outputs;
  for (const Graph::Update &u : g.updates) {
    ++targets[updateTarget(g, u)];
    if (u.output < body.yields.size())
      ++outputs[body.yields[u.output]];
  }
  std::vector<std::pair<Graph::Update, const Op *>> out;
  for (const Graph::Update &u : g.updates) {
    const Value *t = updateTarget(g, u);
    if (!t || u.output >= body.yields.size())
      continue;
    const Value *y = body.yields[u.output];
    if (!y->def || std::find(body.ops.begin(), body.ops.end(), y->def) == body.ops.end() || targets[t] != 1 ||
        outputs[y] != 1 || std::count(body.yields.begin(), body.yields.end(), y) != 1 ||
        std::count(body.yields.begin(), body.yields.end(), t) != 0 || y->type.dtype != t->type.dtype ||
        y->type.dims != t->type.dims)
      continue;
    if (readsAny(*y->def, {t}) && !writesInPlace(*y->def, t, y))
      continue;
    out.emplace_back(u, y->def);
  }
  return out;
}

std::vector<Graph::Update> safeUpdates(const Graph &g) {
  std::vector<Graph::Update> out;
  for (const auto &[u, writer] : updateWriters(g)) {
    std::vector<const Value *> old = viewsOf(g.body, updateTarget(g, u));
    bool seen = false, safe = true;
    for (const Op *op : g.body.ops) {
      if (op == writer)
        seen = true;
      else if (seen && readsAny(*op, old))
        safe = false;
    }
    if (safe)
      out.push_back(u);
  }
  return out;
}

} // namespace dnnc::ir
