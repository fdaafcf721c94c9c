// Fusion passes (see Fusion.h for the contract).
#include "ir/transforms/Fusion.h"

#include "ir/graph/Walk.h"
#include "ir/graph/OpRegistry.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace dnnc::ir {
namespace {
// A fill sized by run-time values (zeros([k]) or arange(n) for an i64[] k or n) binds its
// fresh dims when it runs, which a kernel launch needs before: it stays a host op.
bool sizedByValues(const Op &p) {
  return p.has("value_dims") || p.shapeClass == ShapeClass::ISVDOS || p.shapeClass == ShapeClass::EDO;
}


bool isFill(OpKind k) { return opInfo(k).has(OpFlag::Fill); }

class Fuser {
public:
  Fuser(Graph &g, const std::set<FusionKind> &kinds)
      : g_(g), elementwise_(kinds.count(FusionKind::Elementwise) > 0), injective_(kinds.count(FusionKind::Injective) > 0),
        reduction_(kinds.count(FusionKind::Reduction) > 0), convEpilogue_(kinds.count(FusionKind::ConvEpilogue) > 0) {
    for (const Graph::Update &u : g.updates)
      if (u.output < g.body.yields.size())
        updates_.insert(g.body.yields[u.output]);
  }

  FusionStats run() {
    uses_ = countUses(g_.body);
    walkRegions(g_.body, [&](Region &r) { fuseRegion(r); }, WalkOrder::Post);
    return stats_;
  }

private:
  // The transpose that makes a matmul's B by swapping its last two axes, when the GEMM
  // can read it in place instead (f32, used only there, injective fusion on).
  Op *transposedB(const Op &mm) {
    if (!injective_ || mm.kind != OpKind::Matmul || mm.operands[1]->type.rank() < 2)
      return nullptr;
    Op *t = mm.operands[1]->def;
    if (!t || t->kind != OpKind::Transpose || taken_.count(t) || uses_[mm.operands[1]] != 1)
      return nullptr;
    for (const Value *v : {mm.operands[0], mm.operands[1], mm.results[0]})
      if (v->type.dtype != DType::F32 || v->type.rank() < 2)
        return nullptr;
    size_t rank = t->operands[0]->type.rank();
    if (t->has("perm")) {
      const auto &perm = t->get<DimList>("perm");
      for (size_t k = 0; k < rank; ++k) {
        int64_t p = *perm[k]->asConst();
        int64_t want = k + 2 < rank ? static_cast<int64_t>(k) : static_cast<int64_t>(k + 2 == rank ? rank - 1 : rank - 2);
        if (p != want) // axes are non-negative after sema
          return nullptr;
      }
    }
    return t;
  }

  bool isRoot(const Op &op) const {
    if (sizedByValues(op)) // a host op, nor the root of a group (reshape(x, [s + 1]) had no kernel)
      return false;
    if (isElementwise(op.kind))
      return elementwise_ || injective_;
    if (isInjective(op))
      return injective_;
    if (op.kind == OpKind::Matmul)
      return injective_; // with a transposed B, if it has one
    return reduction_ && isReduction(op.kind);
  }
  // An out-fusable op (the matmul) joins an elementwise root as its GEMM's epilogue: f32
  // matrices (not vectors), and the root reads it at its own shape (no broadcasting). The
  // GEMM accumulates in the root's result buffer, so that is f32 too (a cast to f16 there
  // would have f32 sums written over half the bytes they need).
  bool mayJoinAsGemm(const Op &root, const Op &p) const {
    if (!elementwise_ || !(opInfo(p.kind).pattern == OpPattern::OutFusable || convAsGemm(p)) || !isElementwise(root.kind) ||
        root.results[0]->type.dtype != DType::F32)
      return false;
    for (const Value *v : {p.operands[0], p.operands[1], p.results[0]})
      if (v->type.dtype != DType::F32 || v->type.rank() < 2)
        return false;
    return p.results[0]->type.dims == root.results[0]->type.dims;
  }
  // A conv2d the target runs as an implicit GEMM (FusionKind::ConvEpilogue): its kernel's
  // size known (the GEMM unrolls its taps; a dim there runs as the window loop).
  // (mayJoinAsGemm checks its f32 operands; sema made groups a constant >= 1.)
  bool convAsGemm(const Op &p) const {
    if (!convEpilogue_ || p.kind != OpKind::Conv2d || !p.operands[1]->type.dims[2]->isConst() ||
        !p.operands[1]->type.dims[3]->isConst())
      return false;
    const Attr &a = p.attrs.at("groups");
    int64_t groups = std::get_if<int64_t>(&a) ? std::get<int64_t>(a) : *std::get<sym::ExprRef>(a)->asConst();
    return convGemmChannels(p.results[0]->type.dims[1], groups);
  }
  bool mayJoin(const Op &root, const Op &p) const {
    if (sizedByValues(p))
      return false;
    if (isElementwise(p.kind) || isFill(p.kind))
      return elementwise_ || (reduction_ && isReduction(root.kind));
    return injective_ && isInjective(p);
  }

  // An f32 sum or mean over the last axis of a value shaped like the row group's root,
  // keeping that axis (keepdims): what a row group computes per row before its elements.
  static bool isRowReduction(const Op &p, const std::vector<sym::ExprRef> &rowDims) {
    if ((p.kind != OpKind::Sum && p.kind != OpKind::Mean) || !p.has("axis") || !p.has("keepdims") || !p.get<bool>("keepdims"))
      return false;
    const Value *x = p.operands[0], *r = p.results[0];
    const DimList &axes = p.get<DimList>("axis");
    return x->type.dtype == DType::F32 && r->type.dtype == DType::F32 && x->type.dims == rowDims && axes.size() == 1 &&
           axes[0]->asConst() == static_cast<int64_t>(rowDims.size()) - 1;
  }
  // The row group of an elementwise root (reduction fusion; see Fusion.h), or nothing
  // when no row reduction joins: its elementwise producers and the row reductions among
  // them with their own producers. A value read more than once joins when all its reads
  // are in the group (the kernel computes it where each reads it: layer norm's x - mean
  // is read by the variance's square and by the result), so nothing leaves the kernel
  // but the root.
  std::vector<Op *> rowGroup(Op *root, const std::unordered_set<const Op *> &inRegion) {
    const std::vector<sym::ExprRef> &rowDims = root->results[0]->type.dims;
    if (!reduction_ || !isElementwise(root->kind) || rowDims.empty() || updates_.count(root->results[0]))
      return {};
    std::vector<Op *> group{root};
    std::unordered_set<const Op *> inGroup{root};
    std::unordered_map<const Value *, int> readsInGroup;
    std::vector<const Value *> frontier(root->operands.begin(), root->operands.end());
    bool rows = false;
    while (!frontier.empty() && group.size() < kMaxGroup) {
      const Value *v = frontier.back();
      frontier.pop_back();
      Op *p = v->def;
      if (!p || taken_.count(p) || p->results.size() != 1 || !inRegion.count(p) || inGroup.count(p) || ++readsInGroup[v] < uses_[v])
        continue;
      bool reduce = isRowReduction(*p, rowDims);
      if (!reduce && (!(isElementwise(p->kind) || isFill(p->kind)) || sizedByValues(*p)))
        continue;
      rows = rows || reduce;
      group.push_back(p);
      inGroup.insert(p);
      frontier.insert(frontier.end(), p->operands.begin(), p->operands.end());
    }
    if (!rows)
      return {};
    // The scalar ops the kernel emits, each value once per read (a row reduction once, as
    // a local): chains of values read twice would double at each link.
    std::unordered_map<const Value *, size_t> size; // of the tree that computes each value
    std::function<size_t(const Value *)> sizeOf = [&](const Value *v) -> size_t {
      if (!v->def || !inGroup.count(v->def))
        return 0;
      auto it = size.find(v);
      if (it == size.end()) {
        size_t n = 1;
        for (const Value *o : v->def->operands)
          n = std::min(n + sizeOf(o), kMaxGroup + 1);
        it = size.emplace(v, n).first;
      }
      return isReduction(v->def->kind) ? 1 : it->second;
    };
    size_t total = sizeOf(root->results[0]);
    for (const auto &[v, n] : size)
      total += isReduction(v->def->kind) ? n : 0;
    return total <= kMaxGroup ? group : std::vector<Op *>{};
  }

  // The most ops one fused kernel takes: kernels stay small enough for the lowering's
  // recursion and for LLVM, whatever the model (a 10,000-term sum is 40 kernels).
  static constexpr size_t kMaxGroup = 256;

  // Fuses within `r`, whose nested regions are done (their groups are taken first).
  void fuseRegion(Region &r) {
    std::unordered_set<const Op *> inRegion(r.ops.begin(), r.ops.end());
    // Groups are found first and the region rewritten once at the end (linear time).
    std::unordered_map<const Op *, size_t> groupOf;
    std::vector<std::pair<Op *, std::vector<Op *>>> groups; // root, members (root first)
    // Consumers first, so each group grows from its root back through its producers.
    for (size_t k = r.ops.size(); k-- > 0;) {
      Op *root = r.ops[k];
      if (taken_.count(root) || root->results.size() != 1 || !isRoot(*root))
        continue;
      if (std::vector<Op *> rows = rowGroup(root, inRegion); !rows.empty()) {
        for (Op *op : rows) {
          taken_.insert(op);
          groupOf[op] = groups.size();
        }
        groups.emplace_back(root, std::move(rows));
        continue;
      }
      std::vector<Op *> group{root};
      std::unordered_set<const Op *> inGroup{root};
      bool hasGemm = false;
      // Each value with whether the root reads it elementwise at its own index (through
      // elementwise ops only): a GEMM accumulates in the root's buffer, which the epilogue
      // then overwrites in place, so it may join only where each element is read at the
      // index it is written (a transpose on the way would read elements already overwritten).
      std::vector<std::pair<const Value *, bool>> frontier;
      if (root->kind == OpKind::Matmul) { // a GEMM root takes only a transposed B
        if (Op *t = transposedB(*root))
          group.push_back(t);
      } else {
        for (const Value *v : root->operands)
          frontier.emplace_back(v, true);
      }
      while (!frontier.empty() && group.size() < kMaxGroup) {
        auto [v, pointwise] = frontier.back();
        frontier.pop_back();
        Op *p = v->def;
        if (!p || taken_.count(p) || p->results.size() != 1 || uses_[v] != 1 || !inRegion.count(p) || inGroup.count(p))
          continue;
        // Not into an update (Graph::updates): its result is written over the param the
        // epilogue reads (p - lr·g), which the GEMM's sums would overwrite first.
        bool gemm = !hasGemm && pointwise && mayJoinAsGemm(*root, *p) && v->type.dims == root->results[0]->type.dims &&
                    !updates_.count(root->results[0]);
        if (!gemm && !mayJoin(*root, *p))
          continue;
        group.push_back(p);
        inGroup.insert(p);
        if (gemm) { // the GEMM reads its operands from memory: they stay buffers (B may be read transposed)
          hasGemm = true;
          if (Op *t = transposedB(*p))
            group.push_back(t), inGroup.insert(t);
          continue;
        }
        for (const Value *operand : p->operands)
          frontier.emplace_back(operand, pointwise && isElementwise(p->kind) && operand->type.dims == root->results[0]->type.dims);
      }
      if (group.size() < 2)
        continue;
      for (Op *op : group) {
        taken_.insert(op);
        groupOf[op] = groups.size();
      }
      groups.emplace_back(root, std::move(group));
    }
    if (groups.empty())
      return;
    // Each group's members in program order, then one pass that puts each fused op at
    // its root's place and drops the other members.
    std::vector<std::vector<Op *>> ordered(groups.size());
    for (Op *op : r.ops)
      if (auto it = groupOf.find(op); it != groupOf.end())
        ordered[it->second].push_back(op);
    std::vector<Op *> fused; // made in the order the groups were found (their values' numbers)
    for (size_t gi = 0; gi < groups.size(); ++gi)
      fused.push_back(makeFused(groups[gi].second, ordered[gi], groups[gi].first));
    std::vector<Op *> ops;
    ops.reserve(r.ops.size());
    for (Op *op : r.ops) {
      auto it = groupOf.find(op);
      if (it == groupOf.end())
        ops.push_back(op);
      else if (groups[it->second].first == op)
        ops.push_back(fused[it->second]);
    }
    r.ops = std::move(ops);
  }

  // Makes a fused op of `group` (`ordered`: its ops in program order) for the root's place.
  Op *makeFused(const std::vector<Op *> &group, const std::vector<Op *> &ordered, Op *root) {
    std::unordered_set<const Op *> members(group.begin(), group.end());
    Op *fused = g_.newOp(OpKind::Fused, root->loc);
    auto body = std::make_unique<Region>();
    std::map<const Value *, Value *> argOf;
    for (Op *op : ordered)
      for (Value *&v : op->operands) {
        if (v->def && members.count(v->def))
          continue;
        auto it = argOf.find(v);
        if (it == argOf.end()) {
          Value *arg = g_.newValue(v->type, v->name, v->loc);
          arg->owner = body.get();
          body->args.push_back(arg);
          fused->operands.push_back(v);
          it = argOf.emplace(v, arg).first;
        }
        v = it->second;
      }
    std::vector<Op *> inner = ordered;
    bool elementwise = std::all_of(inner.begin(), inner.end(), [](const Op *op) { return isElementwise(op->kind) || isFill(op->kind); });
    stats_.opsFused += static_cast<int>(inner.size());
    ++stats_.groups;
    // The root's result becomes the fused op's; inside, the root makes a new value.
    Value *result = root->results[0];
    Value *made = g_.newValue(result->type, result->name, result->loc);
    made->def = root;
    root->results[0] = made;
    for (Op *m : inner)
      for (Value *&v : m->operands)
        if (v == result)
          v = made;
    result->def = fused;
    fused->results.push_back(result);
    body->ops = inner;
    body->yields.push_back(made);
    if (elementwise)
      fused->attrs["elementwise"] = true;
    fused->regions.push_back(std::move(body));
    taken_.insert(fused);
    return fused;
  }

  Graph &g_;
  std::unordered_set<const Value *> updates_; // outputs written in place over a param or input
  bool elementwise_, injective_, reduction_, convEpilogue_;
  std::unordered_map<const Value *, int> uses_;
  std::unordered_set<const Op *> taken_;
  FusionStats stats_;
};

} // namespace

FusionStats fuse(Graph &g, const std::set<FusionKind> &kinds) {
  FusionStats s = Fuser(g, kinds).run();
  verify(g);
  return s;
}

FusionStats fuseAll(Graph &g, bool convEpilogues) {
  std::set<FusionKind> kinds{FusionKind::Elementwise, FusionKind::Injective, FusionKind::Reduction};
  if (convEpilogues)
    kinds.insert(FusionKind::ConvEpilogue);
  return fuse(g, kinds);
}

} // namespace dnnc::ir
