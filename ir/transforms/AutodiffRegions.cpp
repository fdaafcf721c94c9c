// The backward of control flow for the differentiate pass (spec training.md §11: control
// flow differentiates as executed).
//
// Contract: regionGrad(op) builds, where the grad op's backward goes, ops that compute the
// gradient contributions to every value `op` reads (its operands and the outer values its
// body reads, e.g. a param w[l]) that the pass wants, given the gradients of op's results.
// - `if`: an `if` on the same condition; each branch recomputes that branch's forward ops
//   (they live in the forward branch's scope, which the backward branch cannot see) and
//   applies the rules to them; it yields the adjoint of each wanted outer value, zeros
//   where that branch does not read it. Only the branch taken runs.
// - loops: a copy of the forward loop that also carries one stash per carried value, into
//   which each iteration writes its carried inputs as a row (the differentiate pass runs
//   it in the forward loop's place, bw.stashedLoops); then a backward `for` over the
//   trip count whose iteration j takes the inputs of the (trips - 1 - j)-th iteration from
//   the stashes, recomputes the body (per-iteration recomputation, as Echo does) and applies
//   the rules, carrying the adjoints of the carried values (seeded with the results'
//   gradients) and the sums of the adjoints of the outer values the body reads (seeded with
//   zeros). Its results are the gradients of the loop's entry values and of those outer
//   values; 0 trips pass the results' gradients to the entry values.
//   - `for` over dims lo..hi: the trip count max(hi - lo, 0) is a dim, the stashes
//     [trips, ...] zeros that iteration i adds its row i - lo to (index_add).
//   - `while` and `for` over run-time bounds: the stashes grow by a row per iteration
//     (concat) from [0, ...]; after the loop their row count, the trip count, is a fresh
//     EDO dim.
// Requires: gradUnsupported(op) is nullopt (carried values are floats whose types do not
// change across iterations; branches agree on shapes). Nested control flow recurses.
#include "ir/transforms/AutodiffRegions.h"

#include "base/Error.h"
#include "ir/graph/OpRegistry.h"
#include "ir/graph/Walk.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <unordered_set>

namespace dnnc::ir {
namespace {
using sym::ExprRef;

// Copies ops into a builder with some values replaced (a region's arguments by the values
// standing for them); values not in `map` (outer values) are read as they are.
struct Cloner {
  Graph &g;
  std::unordered_map<const Value *, Value *> map;

  Value *get(Value *v) const {
    auto it = map.find(v);
    return it == map.end() ? v : it->second;
  }
  Value *fresh(const Value *like) {
    Value *v = g.newValue(like->type, like->name, like->loc);
    map[like] = v;
    return v;
  }
  Op *clone(const Op &op) {
    Op *c = g.newOp(op.kind, op.loc);
    c->attrs = op.attrs;
    c->shapeClass = op.shapeClass;
    for (Value *v : op.operands)
      c->operands.push_back(get(v));
    for (const auto &r : op.regions) {
      auto region = std::make_unique<Region>();
      for (const Value *a : r->args) {
        Value *na = fresh(a);
        na->owner = region.get();
        region->args.push_back(na);
      }
      for (const Op *inner : r->ops)
        region->ops.push_back(clone(*inner));
      for (Value *y : r->yields)
        region->yields.push_back(get(y));
      c->regions.push_back(std::move(region));
    }
    for (const Value *r : op.results) {
      Value *nr = fresh(r);
      nr->def = c;
      c->results.push_back(nr);
    }
    return c;
  }
  // Clones every op of `r` into `bw`; returns the clones in order.
  std::vector<Op *> cloneInto(GraphBuilder &bw, const Region &r) {
    std::vector<Op *> out;
    for (const Op *op : r.ops) {
      out.push_back(clone(*op));
      bw.append(out.back());
    }
    return out;
  }
};

bool isFloatValue(const Value *v) { return isFloat(v->type.dtype); }

// The float values the sweep over `ops` must reach: `seeds` (values a gradient is wanted
// for) and every float value computed from them.
std::unordered_set<const Value *> dependentOn(const std::vector<Op *> &ops, const std::vector<const Value *> &seeds) {
  std::unordered_set<const Value *> dep(seeds.begin(), seeds.end());
  for (const Op *op : ops) {
    std::vector<Value *> in = gradInputs(*op);
    if (std::any_of(in.begin(), in.end(), [&](const Value *v) { return dep.count(v) && isFloatValue(v); }))
      for (const Value *r : op->results)
        if (isFloatValue(r))
          dep.insert(r);
  }
  return dep;
}

// A control-flow op built by the pass (sema types these, not a rule).
Op *regionOp(GraphBuilder &bw, OpKind kind, std::vector<Value *> operands, std::vector<std::unique_ptr<Region>> regions,
             const std::vector<TensorType> &resultTypes, const std::vector<std::string> &names) {
  Op *op = bw.graph().newOp(kind, bw.loc());
  op->shapeClass = ShapeClass::ISDOS;
  op->operands = std::move(operands);
  op->regions = std::move(regions);
  for (size_t k = 0; k < resultTypes.size(); ++k) {
    Value *v = bw.graph().newValue(resultTypes[k], names[k], bw.loc());
    v->def = op;
    op->results.push_back(v);
  }
  bw.append(op);
  return op;
}

Value *arg(Graph &g, Region &r, const TensorType &t, const std::string &name, SourceRange loc) {
  Value *v = g.newValue(t, name, loc);
  v->owner = &r;
  r.args.push_back(v);
  return v;
}

Value *zerosLike(GraphBuilder &b, const TensorType &t) {
  return b.emit(OpKind::Zeros, {}, {{"shape", t.dims}, {"dtype", t.dtype}});
}

// sum + g for the running sum of a captured value's adjoint (a backward loop's carried
// d_w). The gradient of a stacked param's row w[l] is index_add(zeros, [l], g): then the
// row is added to the sum itself, index_add(sum, [l], g), instead of zeros of the whole
// param filled, the row added in and the whole added to the sum every iteration. The
// values are the same: sum + (0 + g) is sum + g, and sum + 0 is sum (but for -0, which
// becomes +0 that way). Not when `shared`: g is another value's gradient too (an add
// passes one to both operands), and the rewrite would take its ops from under that reader.
Value *accumulateScatter(GraphBuilder &inner, Value *sum, Value *g, bool shared) {
  Op *scatter = g->def, *zeros = scatter && scatter->kind == OpKind::IndexAdd ? scatter->operands[0]->def : nullptr;
  auto starts = [&](const Op *op) {
    return inner.backwardStarts && std::find(inner.backwardStarts->begin(), inner.backwardStarts->end(), op) != inner.backwardStarts->end();
  };
  if (shared || !zeros || zeros->kind != OpKind::Zeros || !(g->type == sum->type) || starts(scatter) || starts(zeros))
    return inner.emit(OpKind::Add, {sum, g});
  int reads = 0; // of g and of the zeros, by any op built so far
  for (const Op *op : inner.built)
    forEachRead(*op, [&](const Value *v) { reads += v == g || v == zeros->results[0]; });
  if (reads != 1)
    return inner.emit(OpKind::Add, {sum, g});
  inner.built.erase(std::remove_if(inner.built.begin(), inner.built.end(), [&](const Op *op) { return op == scatter || op == zeros; }),
                    inner.built.end());
  return inner.emit(OpKind::IndexAdd, {sum, scatter->operands[1], scatter->operands[2]}, scatter->attrs);
}

// One region's backward, built into `inner`: `ops` (clones of a forward region) swept in
// reverse from the seeds (the gradients of its yields), wanting every float value computed
// from `sources` (the values standing for its carried inputs, the wanted outer values);
// returns the adjoints.
Adjoints sweep(GraphBuilder &inner, const std::vector<Op *> &ops, const std::vector<const Value *> &sources,
               const std::vector<std::pair<const Value *, Value *>> &seeds) {
  inner.wanted = dependentOn(ops, sources);
  size_t start = inner.built.size();
  Adjoints adjoint;
  for (auto [v, g] : seeds)
    if (g)
      accumulate(inner, adjoint, v, g);
  backprop(inner, ops, adjoint);
  if (inner.backwardStarts && inner.built.size() > start) // the replayed forward before, the backward from here
    inner.backwardStarts->push_back(inner.built[start]);
  return adjoint;
}

// Drops the ops among `replayed` whose results nothing in `r` reads (a later op, a nested
// region, the yields), from the last back: the replayed forward values the backward's
// rules do not read, such as a layer's last matmul, which only fed the next layer.
void dropUnread(Region &r, const std::vector<Op *> &replayed) {
  std::unordered_set<const Op *> candidates(replayed.begin(), replayed.end());
  std::unordered_set<const Value *> read(r.yields.begin(), r.yields.end());
  std::vector<Op *> kept;
  for (size_t k = r.ops.size(); k-- > 0;) {
    Op *op = r.ops[k];
    bool unread = candidates.count(op) && !op->results.empty() && op->kind != OpKind::AssertDims &&
                  std::none_of(op->results.begin(), op->results.end(), [&](const Value *v) { return read.count(v) != 0; });
    if (unread)
      continue;
    forEachRead(*op, [&](const Value *v) { read.insert(v); });
    kept.push_back(op);
  }
  r.ops.assign(kept.rbegin(), kept.rend());
}

std::string gradName(const Value *v) { return v->name.empty() ? std::string() : "d_" + v->name; }

// The float outer values a loop or branch reads whose gradients the pass wants.
std::vector<Value *> wantedCaptures(const GraphBuilder &bw, const Op &op) {
  std::vector<Value *> caps;
  for (Value *c : regionCaptures(op))
    if (isFloatValue(c) && bw.wants(c))
      caps.push_back(c);
  return caps;
}

std::vector<std::pair<const Value *, Value *>> ifGrad(GraphBuilder &bw, const Op &op, const std::vector<Value *> &resultGrads) {
  std::vector<Value *> caps = wantedCaptures(bw, op);
  std::vector<std::unique_ptr<Region>> branches;
  for (const auto &fwd : op.regions) {
    GraphBuilder inner(bw.graph(), bw.analyzer(), bw.loc());
    inner.backwardStarts = bw.backwardStarts;
    Cloner cl{bw.graph(), {}};
    std::vector<Op *> ops = cl.cloneInto(inner, *fwd);
    std::vector<std::pair<const Value *, Value *>> seeds;
    for (size_t k = 0; k < op.results.size(); ++k)
      seeds.emplace_back(cl.get(fwd->yields[k]), resultGrads[k]);
    Adjoints adj = sweep(inner, ops, std::vector<const Value *>(caps.begin(), caps.end()), seeds);
    auto region = std::make_unique<Region>();
    for (Value *c : caps) {
      auto it = adj.find(c);
      region->yields.push_back(it != adj.end() ? it->second : zerosLike(inner, c->type));
    }
    region->ops = inner.built;
    branches.push_back(std::move(region));
  }
  std::vector<TensorType> types;
  std::vector<std::string> names;
  for (const Value *c : caps)
    types.push_back(c->type), names.push_back(gradName(c));
  Op *back = regionOp(bw, OpKind::If, {op.operands[0]}, std::move(branches), types, names);
  std::vector<std::pair<const Value *, Value *>> out;
  for (size_t k = 0; k < caps.size(); ++k)
    out.emplace_back(caps[k], back->results[k]);
  return out;
}

// v's type with a leading axis of `rows`: a stash of v per iteration.
TensorType stashType(const Value *v, ExprRef rows) {
  DimList dims{rows};
  dims.insert(dims.end(), v->type.dims.begin(), v->type.dims.end());
  return {v->type.dtype, dims};
}

Value *asRow(GraphBuilder &b, Value *v) { return b.emit(OpKind::Reshape, {v}, {{"shape", stashType(v, sym::constant(1)).dims}}); }

// A loop's forward again with one stash per carried value appended to what it carries:
// `region` gets the args of `fwd` (offset: the loop variable's), clones of its ops and
// yields, and a stash arg per carried value typed by `stashArgType`; `write` builds the
// next stash from the stash arg and that iteration's carried input.
void stashingBody(GraphBuilder &bw, Region &region, const Region &fwd, size_t offset, const std::vector<TensorType> &stashArgTypes,
                  const std::function<Value *(GraphBuilder &, Value *stash, Value *in)> &write, bool yields) {
  Graph &g = bw.graph();
  GraphBuilder inner(g, bw.analyzer(), bw.loc());
  Cloner cl{g, {}};
  for (const Value *a : fwd.args) {
    Value *na = cl.fresh(a);
    na->owner = &region;
    region.args.push_back(na);
  }
  std::vector<Value *> stashArgs;
  for (const TensorType &t : stashArgTypes)
    stashArgs.push_back(arg(g, region, t, "stash", bw.loc()));
  cl.cloneInto(inner, fwd);
  for (Value *y : fwd.yields)
    region.yields.push_back(cl.get(y));
  if (yields)
    for (size_t k = 0; k < stashArgs.size(); ++k)
      region.yields.push_back(write(inner, stashArgs[k], region.args[k + offset]));
  region.ops = inner.built;
}

// The loop variable of the iteration whose carried inputs are stash row `row` (null: a
// while has none).
using LoopVar = std::function<Value *(GraphBuilder &, Value *row)>;

// The backward loop over the `trips` forward iterations of `op` (its body `body`, whose
// carried args start at `offset`: after a for's loop variable), given the stash of each
// carried value (row r: the inputs of the r-th iteration run): iteration j redoes the
// forward iteration of row trips - 1 - j. Returns the gradient contributions to op's entry
// values and to `caps`.
std::vector<std::pair<const Value *, Value *>> reverseLoop(GraphBuilder &bw, const Op &op, const Region &body, size_t offset,
                                                           const LoopVar &loopVar, ExprRef trips, const std::vector<Value *> &stashes,
                                                           const std::vector<Value *> &caps, const std::vector<Value *> &resultGrads) {
  Graph &g = bw.graph();
  SourceRange loc = bw.loc();
  size_t n = op.results.size();
  std::vector<Value *> operands;
  for (size_t k = 0; k < n; ++k)
    operands.push_back(resultGrads[k] ? resultGrads[k] : zerosLike(bw, op.results[k]->type));
  for (const Value *c : caps)
    operands.push_back(zerosLike(bw, c->type));
  auto region = std::make_unique<Region>();
  GraphBuilder inner(g, bw.analyzer(), loc);
  inner.backwardStarts = bw.backwardStarts;
  Value *j = arg(g, *region, {DType::I64, {}}, "j", loc);
  std::vector<Value *> dCarried, dCaps;
  for (size_t k = 0; k < n; ++k)
    dCarried.push_back(arg(g, *region, body.args[k + offset]->type, gradName(body.args[k + offset]), loc));
  for (const Value *c : caps)
    dCaps.push_back(arg(g, *region, c->type, gradName(c), loc));
  Value *last = inner.emit(OpKind::Sub, {inner.dimValue(trips, DType::I64), inner.constant(1, DType::I64)});
  Value *r = inner.emit(OpKind::Sub, {last, j}); // the stash row
  Cloner cl{g, {}};
  if (loopVar)
    cl.map[body.args[0]] = loopVar(inner, r);
  Value *row = inner.emit(OpKind::Reshape, {r}, {{"shape", DimList{sym::constant(1)}}});
  std::vector<const Value *> sources(caps.begin(), caps.end());
  for (size_t k = 0; k < n; ++k) {
    Value *taken = inner.emit(OpKind::Take, {stashes[k], row}, {{"axis", sym::constant(0)}});
    Value *in = inner.emit(OpKind::Reshape, {taken}, {{"shape", body.args[k + offset]->type.dims}});
    cl.map[body.args[k + offset]] = in;
    sources.push_back(in);
  }
  std::vector<Op *> ops = cl.cloneInto(inner, body);
  std::vector<std::pair<const Value *, Value *>> seeds;
  for (size_t k = 0; k < n; ++k)
    seeds.emplace_back(cl.get(body.yields[k]), dCarried[k]);
  Adjoints adj = sweep(inner, ops, sources, seeds);
  for (size_t k = 0; k < n; ++k) {
    auto it = adj.find(cl.get(body.args[k + offset]));
    region->yields.push_back(it != adj.end() ? it->second : zerosLike(inner, body.args[k + offset]->type));
  }
  for (size_t c = 0; c < caps.size(); ++c) {
    auto it = adj.find(caps[c]);
    if (it == adj.end()) {
      region->yields.push_back(dCaps[c]);
      continue;
    }
    bool shared = std::count(region->yields.begin(), region->yields.end(), it->second) != 0;
    for (size_t other = 0; other < caps.size(); ++other)
      if (auto o = adj.find(caps[other]); other != c && o != adj.end() && o->second == it->second)
        shared = true;
    region->yields.push_back(accumulateScatter(inner, dCaps[c], it->second, shared));
  }
  region->ops = inner.built;
  dropUnread(*region, ops);
  std::vector<TensorType> types;
  std::vector<std::string> names;
  std::string carriedText;
  for (const Value *a : region->args)
    if (a != j)
      types.push_back(a->type), names.push_back(a->name), carriedText += (carriedText.empty() ? "" : ",") + a->name;
  std::vector<std::unique_ptr<Region>> regions;
  regions.push_back(std::move(region));
  Op *back = regionOp(bw, OpKind::For, std::move(operands), std::move(regions), types, names);
  back->attrs = {{"lo", sym::constant(0)}, {"hi", trips}, {"carried", carriedText}};
  std::vector<std::pair<const Value *, Value *>> out;
  size_t from = op.operands.size() - n; // a for's run-time bounds come first
  for (size_t k = 0; k < n; ++k)
    if (bw.wants(op.operands[from + k]))
      out.emplace_back(op.operands[from + k], back->results[k]);
  for (size_t c = 0; c < caps.size(); ++c)
    out.emplace_back(caps[c], back->results[n + c]);
  return out;
}

std::vector<std::string> stashNames(const Op &op) {
  std::vector<std::string> names;
  for (const Value *r : op.results)
    names.push_back(r->name);
  names.resize(2 * op.results.size(), "stash");
  return names;
}

std::string stashCarried(const Op &op) {
  std::string carried = op.get<std::string>("carried");
  for (size_t k = 0; k < op.results.size(); ++k)
    carried += ",stash";
  return carried;
}

std::vector<std::pair<const Value *, Value *>> growingStashGrad(GraphBuilder &bw, const Op &op, const std::vector<Value *> &resultGrads);

// for i in lo..hi over dims: the stashes are [trips, ...] zeros that iteration i adds its
// inputs to at row i - lo.
std::vector<std::pair<const Value *, Value *>> forGrad(GraphBuilder &bw, const Op &op, const std::vector<Value *> &resultGrads) {
  if (!op.has("lo"))
    return growingStashGrad(bw, op, resultGrads);
  const Region &body = *op.regions.back();
  ExprRef lo = op.get<ExprRef>("lo"), hi = op.get<ExprRef>("hi");
  ExprRef trips = bw.analyzer().simplify(sym::max(sym::sub(hi, lo), sym::constant(0)));
  std::vector<Value *> operands = op.operands;
  std::vector<TensorType> stashTypes, types;
  for (const Value *v : op.operands) {
    stashTypes.push_back(stashType(v, trips));
    operands.push_back(zerosLike(bw, stashTypes.back()));
  }
  auto region = std::make_unique<Region>();
  Value *rowValue = nullptr;
  stashingBody(bw, *region, body, 1, stashTypes,
               [&](GraphBuilder &b, Value *stash, Value *in) {
                 if (!rowValue)
                   rowValue = b.emit(OpKind::Reshape, {b.emit(OpKind::Sub, {region->args[0], b.dimValue(lo, DType::I64)})},
                                     {{"shape", DimList{sym::constant(1)}}});
                 return b.emit(OpKind::IndexAdd, {stash, rowValue, asRow(b, in)}, {{"axis", sym::constant(0)}});
               },
               true);
  for (const Value *r : op.results)
    types.push_back(r->type);
  types.insert(types.end(), stashTypes.begin(), stashTypes.end());
  std::vector<std::unique_ptr<Region>> regions;
  regions.push_back(std::move(region));
  Op *fwd = regionOp(bw, OpKind::For, std::move(operands), std::move(regions), types, stashNames(op));
  fwd->attrs = op.attrs;
  fwd->attrs["carried"] = stashCarried(op);
  if (bw.stashedLoops)
    bw.stashedLoops->push_back({&op, fwd});
  std::vector<Value *> stashes(fwd->results.begin() + static_cast<long>(op.results.size()), fwd->results.end());
  LoopVar loopVar = [&](GraphBuilder &b, Value *row) { return b.emit(OpKind::Add, {row, b.dimValue(lo, DType::I64)}); };
  return reverseLoop(bw, op, body, 1, loopVar, trips, stashes, wantedCaptures(bw, op), resultGrads);
}

// while, and for over run-time bounds: the trip count is known only by running, so the
// stashes grow by a row per iteration (concat) from [0, ...]. Their row count is
// loop-variant inside the loop (a fresh dim bound per iteration) and, after it, the trip
// count: a fresh dim (EDO) that the backward for runs over.
std::vector<std::pair<const Value *, Value *>> growingStashGrad(GraphBuilder &bw, const Op &op, const std::vector<Value *> &resultGrads) {
  bool isFor = op.kind == OpKind::For;
  size_t from = isFor ? 2 : 0; // a for's bounds, then the carried values
  ExprRef rows = bw.freshDim("stash_rows"), trips = bw.freshDim("iters");
  std::vector<Value *> operands = op.operands;
  std::vector<TensorType> stashArgTypes, types;
  for (size_t k = from; k < op.operands.size(); ++k) {
    stashArgTypes.push_back(stashType(op.operands[k], rows));
    operands.push_back(zerosLike(bw, stashType(op.operands[k], sym::constant(0))));
  }
  auto write = [](GraphBuilder &b, Value *stash, Value *in) {
    return b.emit(OpKind::Concat, {stash, asRow(b, in)}, {{"axis", sym::constant(0)}});
  };
  std::vector<std::unique_ptr<Region>> regions;
  for (size_t r = 0; r < op.regions.size(); ++r) { // a while's condition, then the body
    regions.push_back(std::make_unique<Region>());
    stashingBody(bw, *regions.back(), *op.regions[r], isFor ? 1 : 0, stashArgTypes, write, r + 1 == op.regions.size());
  }
  for (const Value *r : op.results)
    types.push_back(r->type);
  for (size_t k = from; k < op.operands.size(); ++k)
    types.push_back(stashType(op.operands[k], trips));
  Op *fwd = regionOp(bw, op.kind, std::move(operands), std::move(regions), types, stashNames(op));
  fwd->attrs = op.attrs;
  fwd->attrs["carried"] = stashCarried(op);
  fwd->shapeClass = ShapeClass::EDO;
  if (bw.stashedLoops)
    bw.stashedLoops->push_back({&op, fwd});
  std::vector<Value *> stashes(fwd->results.begin() + static_cast<long>(op.results.size()), fwd->results.end());
  LoopVar loopVar;
  if (isFor) { // iteration r runs i = lo + r
    Value *lo = op.operands[0];
    loopVar = [lo](GraphBuilder &b, Value *row) {
      Value *start = lo->type.dtype == DType::I64 ? lo : b.emit(OpKind::Cast, {lo}, {{"dtype", DType::I64}});
      return b.emit(OpKind::Add, {row, start});
    };
  }
  return reverseLoop(bw, op, *op.regions.back(), isFor ? 1 : 0, loopVar, trips, stashes, wantedCaptures(bw, op), resultGrads);
}
} // namespace

std::vector<std::pair<const Value *, Value *>> regionGrad(GraphBuilder &bw, const Op &op, const std::vector<Value *> &resultGrads) {
  switch (op.kind) {
  case OpKind::If: return ifGrad(bw, op, resultGrads);
  case OpKind::For: return forGrad(bw, op, resultGrads);
  case OpKind::While: return growingStashGrad(bw, op, resultGrads);
  default: throw InternalError(fmt::format("'{}' reached the differentiate pass without a gradient", opInfo(op.kind).spelling));
  }
}

} // namespace dnnc::ir
