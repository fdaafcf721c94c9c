// Traversal of the graph IR written once: every op or every region, nested regions
// included, and the values an op reads through its regions; and the use counts built on it.
//
// Contract: visits follow program order. walk() calls `f` on each op before (Pre) or after
// (Post) the ops of its regions; walkRegions() calls `f` on `r` and every nested region,
// a region before (Pre) or after (Post) the regions nested in it. `f` may change an op or
// a region's contents but not the list it is being visited from.
#pragma once

#include "ir/graph/Graph.h"

#include <type_traits>
#include <unordered_map>

namespace dnnc::ir {

enum class WalkOrder { Pre, Post };

template <class RegionT, class F> void walk(RegionT &r, F &&f, WalkOrder order = WalkOrder::Pre) {
  using OpT = std::conditional_t<std::is_const_v<RegionT>, const Op, Op>;
  for (OpT *op : r.ops) {
    if (order == WalkOrder::Pre)
      f(*op);
    for (auto &sub : op->regions)
      walk(static_cast<RegionT &>(*sub), f, order);
    if (order == WalkOrder::Post)
      f(*op);
  }
}

template <class RegionT, class F> void walkRegions(RegionT &r, F &&f, WalkOrder order = WalkOrder::Pre) {
  if (order == WalkOrder::Pre)
    f(r);
  for (const Op *op : r.ops)
    for (auto &sub : op->regions)
      walkRegions(static_cast<RegionT &>(*sub), f, order);
  if (order == WalkOrder::Post)
    f(r);
}

// Every value `op` reads: its operands, and the operands and yields of every op and
// region nested in it (a value used inside a loop body is read by the loop).
template <class F> void forEachRead(const Op &op, F &&f) {
  for (const Value *v : op.operands)
    f(v);
  for (const auto &sub : op.regions) {
    for (const Op *inner : sub->ops)
      forEachRead(*inner, f);
    for (const Value *y : sub->yields)
      f(y);
  }
}

// How many times each value is read in `r`: by its ops (nested regions included, see
// forEachRead) and by its yields.
inline std::unordered_map<const Value *, int> countUses(const Region &r) {
  std::unordered_map<const Value *, int> uses;
  for (const Op *op : r.ops)
    forEachRead(*op, [&](const Value *v) { ++uses[v]; });
  for (const Value *y : r.yields)
    ++uses[y];
  return uses;
}

} // namespace dnnc::ir
