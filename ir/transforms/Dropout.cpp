// See Dropout.h.
#include "ir/transforms/Dropout.h"

#include "ir/graph/Walk.h"

#include <algorithm>
#include <unordered_map>

namespace dnnc::ir {

std::vector<Op *> dropoutOps(Graph &g) {
  std::vector<Op *> ops;
  walk(g.body, [&](Op &op) {
    if (op.kind == OpKind::Dropout)
      ops.push_back(&op);
  });
  return ops;
}

void trainDropouts(const std::vector<Op *> &ops, Value *rng) {
  for (Op *op : ops) {
    op->attrs["training"] = true;
    if (rng && op->operands.size() == 1)
      op->operands.push_back(rng);
  }
}

void resolveDropout(Graph &g) {
  std::vector<Op *> ops = dropoutOps(g);
  if (ops.empty())
    return;
  bool grads = false;
  walk(g.body, [&](Op &op) { grads = grads || op.kind == OpKind::Grad; });
  int64_t stream = 0;
  for (Op *op : ops)
    if (!op->has("stream"))
      op->attrs["stream"] = stream++;
  if (grads)
    trainDropouts(ops, nullptr);
  // The identities: each use of the result reads x (defined before it, in this region or
  // an enclosing one, so every use still sees it).
  std::unordered_map<const Value *, Value *> forward;
  for (Op *op : ops)
    if (!(op->has("training") && op->get<bool>("training")))
      forward[op->results[0]] = op->operands[0];
  if (forward.empty())
    return;
  auto resolve = [&](Value *v) {
    for (auto it = forward.find(v); it != forward.end(); it = forward.find(v))
      v = it->second;
    return v;
  };
  walkRegions(g.body, [&](Region &r) {
    for (Op *op : r.ops)
      for (Value *&v : op->operands)
        v = resolve(v);
    for (Value *&v : r.yields)
      v = resolve(v);
    r.ops.erase(std::remove_if(r.ops.begin(), r.ops.end(), [&](Op *op) { return op->kind == OpKind::Dropout && forward.count(op->results[0]); }),
                r.ops.end());
  });
}

} // namespace dnnc::ir
