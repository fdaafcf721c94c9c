// The differentiate pass (see Autodiff.h).
#include "ir/transforms/Autodiff.h"

#include "base/Error.h"
#include "ir/graph/Binding.h"
#include "ir/graph/GradRules.h"
#include "ir/graph/OpRegistry.h"
#include "ir/graph/Walk.h"
#include "ir/transforms/AutodiffRegions.h"
#include "ir/transforms/MemoryPlan.h"
#include "ir/transforms/RankDimPropagation.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace dnnc::ir {

void accumulate(GraphBuilder &bw, Adjoints &adjoint, const Value *v, Value *g) {
  auto [it, fresh] = adjoint.emplace(v, g);
  if (!fresh)
    it->second = bw.emit(OpKind::Add, {it->second, g}, {});
}

void backprop(GraphBuilder &bw, const std::vector<Op *> &ops, Adjoints &adjoint) {
  for (size_t i = ops.size(); i-- > 0;) {
    const Op &op = *ops[i];
    std::vector<Value *> resultGrads;
    bool any = false;
    for (const Value *r : op.results) {
      auto it = adjoint.find(r);
      resultGrads.push_back(it == adjoint.end() ? nullptr : it->second);
      any = any || it != adjoint.end();
    }
    if (!any)
      continue;
    if (!op.regions.empty()) { // control flow: its operands and the outer values its body reads
      for (auto [v, g] : regionGrad(bw, op, resultGrads))
        accumulate(bw, adjoint, v, g);
      continue;
    }
    GradRule rule = opInfo(op.kind).grad;
    if (!rule) // expand() refused this grad's path already (gradBlocker)
      throw InternalError(fmt::format("'{}' reached the differentiate pass without a gradient rule", opInfo(op.kind).spelling));
    std::vector<Value *> grads = rule(bw, op, resultGrads);
    for (size_t k = 0; k < op.operands.size() && k < grads.size(); ++k)
      if (grads[k] && bw.wants(op.operands[k]))
        accumulate(bw, adjoint, op.operands[k], grads[k]);
  }
}

namespace {

// Replaces `grad` (in `region` at position `at`) by its backward ops; returns how many ops
// now stand where it stood.
size_t expand(Graph &g, sym::Analyzer &an, Region &region, size_t at, std::vector<const Op *> &starts) {
  Op &grad = *region.ops[at];
  Value *y = grad.operands[0];
  std::vector<const Value *> xs(grad.operands.begin() + 1, grad.operands.end());
  std::vector<bool> reached;
  std::vector<Op *> path = gradPath(region, y, xs, reached);
  // Sema refused the grads it saw through ops without a gradient; a grad of a grad meets
  // the inner one's backward ops (conv2d_grad_input, a while's growing stashes), and a
  // training step's loss grad (TrainStep.cpp) any op of the model.
  if (std::optional<GradBlock> block = gradBlocker(region, y, xs))
    throw DataError(fmt::format("{}: no gradient can be taken through it: {}", opWhere(*block->op), block->why));
  // The values whose gradients are needed: the xs and what the path computes from them
  // (not constants, params or inputs off the path, which a rule then skips).
  std::unordered_set<const Value *> wanted(xs.begin(), xs.end());
  for (const Op *op : path)
    wanted.insert(op->results.begin(), op->results.end());
  GraphBuilder bw(g, an, grad.loc);
  bw.wanted = wanted;
  bw.backwardStarts = &starts;
  std::vector<std::pair<const Op *, Op *>> stashedLoops;
  bw.stashedLoops = &stashedLoops;
  size_t first = starts.size();
  Adjoints adjoint;
  adjoint[y] = bw.constant(1.0, y->type.dtype);
  backprop(bw, path, adjoint);
  // grad's results become the gradients (zeros for an x that y does not reach).
  std::unordered_map<const Value *, Value *> replaced;
  for (size_t k = 0; k < xs.size(); ++k) {
    Value *result = grad.results[k];
    auto it = adjoint.find(xs[k]);
    Value *value = it != adjoint.end() ? it->second
                                       : bw.emit(OpKind::Zeros, {}, {{"shape", xs[k]->type.dims}, {"dtype", xs[k]->type.dtype}});
    if (value->type.dtype != result->type.dtype)
      value = bw.emit(OpKind::Cast, {value}, {{"dtype", result->type.dtype}});
    if (value->name.empty())
      value->name = result->name;
    replaced[result] = value;
  }
  // A loop's stashing copy computes what the loop computes (its body, from its operands):
  // it runs in the loop's place, with the ops it reads that the backward made (its
  // stashes' zeros), and the loop goes. Else the forward of every iteration ran three
  // times: the loop, the copy, the backward's replay.
  // Not while another grad in the region is still to be expanded: it would differentiate
  // the copy, stashes and all (a stash of the stashes per iteration); the last grad moves
  // its copy.
  if (std::any_of(region.ops.begin(), region.ops.end(), [&](const Op *op) { return op != &grad && op->kind == OpKind::Grad; }))
    stashedLoops.clear();
  std::vector<std::pair<size_t, std::vector<Op *>>> moves; // (the loop's index, what replaces it)
  for (auto [loop, copy] : stashedLoops) {
    auto where = std::find(region.ops.begin(), region.ops.begin() + static_cast<long>(at), loop);
    if (where == region.ops.begin() + static_cast<long>(at))
      continue;
    std::unordered_set<const Value *> read(copy->operands.begin(), copy->operands.end());
    std::vector<Op *> moved{copy};
    for (size_t k = bw.built.size(); k-- > 0;) {
      Op *op = bw.built[k];
      if (op == copy || std::none_of(op->results.begin(), op->results.end(), [&](const Value *v) { return read.count(v) != 0; }))
        continue;
      read.insert(op->operands.begin(), op->operands.end());
      moved.insert(moved.begin(), op);
    }
    std::unordered_set<const Value *> later; // defined from the loop on: not readable before it
    for (auto op = where; op != region.ops.begin() + static_cast<long>(at); ++op)
      later.insert((*op)->results.begin(), (*op)->results.end());
    std::unordered_set<const Op *> gone(moved.begin(), moved.end());
    bool readsLater = false;
    for (const Op *op : moved)
      for (const Value *v : op->operands)
        readsLater = readsLater || (later.count(v) && !gone.count(v->def));
    if (readsLater)
      continue;
    bw.built.erase(std::remove_if(bw.built.begin(), bw.built.end(), [&](const Op *op) { return gone.count(op) != 0; }), bw.built.end());
    copy->loc = loop->loc;
    for (size_t k = 0; k < loop->results.size(); ++k) {
      copy->results[k]->name = loop->results[k]->name;
      replaced[loop->results[k]] = copy->results[k];
    }
    moves.push_back({static_cast<size_t>(where - region.ops.begin()), std::move(moved)});
  }
  if (!bw.built.empty()) // the span's first op, before any nested span's
    starts.insert(starts.begin() + static_cast<long>(first), bw.built.front());
  region.ops.erase(region.ops.begin() + static_cast<long>(at));
  region.ops.insert(region.ops.begin() + static_cast<long>(at), bw.built.begin(), bw.built.end());
  size_t end = at + bw.built.size(); // past the backward ops
  std::sort(moves.begin(), moves.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
  for (auto &[index, ops] : moves) { // from the last loop back: the earlier indices hold
    region.ops.erase(region.ops.begin() + static_cast<long>(index));
    region.ops.insert(region.ops.begin() + static_cast<long>(index), ops.begin(), ops.end());
    end += ops.size() - 1;
  }
  walkRegions(g.body, [&](Region &r) {
    for (Op *op : r.ops)
      for (Value *&v : op->operands)
        if (auto it = replaced.find(v); it != replaced.end())
          v = it->second;
    for (Value *&v : r.yields)
      if (auto it = replaced.find(v); it != replaced.end())
        v = it->second;
  });
  return end - at;
}
} // namespace

std::vector<const Op *> differentiate(Graph &g) {
  sym::Analyzer an = analyzerFor(g);
  std::vector<const Op *> starts;
  walkRegions(g.body, [&](Region &r) {
    for (size_t i = 0; i < r.ops.size(); ++i)
      if (r.ops[i]->kind == OpKind::Grad)
        i += expand(g, an, r, i, starts) - 1;
  });
  return starts;
}

} // namespace dnnc::ir
