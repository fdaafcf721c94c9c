// Fused attention (see FuseAttention.h).
#include "ir/transforms/FuseAttention.h"

#include "ir/graph/Walk.h"

#include <algorithm>
#include <optional>
#include <set>

namespace dnnc::ir {

namespace {

bool isF32(const Value *v) { return v->type.dtype == DType::F32; }

// The value of a rank-0 f32 constant.
std::optional<double> scalarConstant(const Value *v) {
  if (!v->def || v->def->kind != OpKind::Constant || v->type.rank() != 0 || !isF32(v))
    return std::nullopt;
  return v->def->get<double>("value");
}

// An integer attribute that is a constant (an int or a constant dim expression).
std::optional<int64_t> constAttr(const Op &op, const char *k) {
  if (!op.has(k))
    return std::nullopt;
  const Attr &at = op.attrs.at(k);
  if (auto *i = std::get_if<int64_t>(&at))
    return *i;
  if (auto *e = std::get_if<sym::ExprRef>(&at))
    return (*e)->asConst();
  return std::nullopt;
}

// Whether `x` is arange(n) with start 0 and step 1, unsqueezed at `axis` (so [1, n] or [n, 1]).
bool unsqueezedArange(const Value *x, int64_t axis, sym::ExprRef n) {
  const Op *u = x->def;
  if (!u || u->kind != OpKind::Unsqueeze || constAttr(*u, "axis") != axis)
    return false;
  const Op *a = u->operands[0]->def;
  if (!a || a->kind != OpKind::Arange || !a->has("count"))
    return false;
  const Attr &count = a->attrs.at("count");
  auto *c = std::get_if<sym::ExprRef>(&count);
  bool sameCount = c ? *c == n : n->asConst() == constAttr(*a, "count");
  return sameCount && constAttr(*a, "start") == 0 && constAttr(*a, "step") == 1;
}

// Whether `cond` is the causal predicate over T queries and T keys: key j visible from
// query i iff j <= i.
bool causalPredicate(const Value *cond, sym::ExprRef t) {
  const Op *p = cond->def;
  if (!p || p->operands.size() != 2)
    return false;
  if (p->kind == OpKind::Le) // arange(T)[j] <= arange(T)[i]
    return unsqueezedArange(p->operands[0], 0, t) && unsqueezedArange(p->operands[1], 1, t);
  if (p->kind == OpKind::Ge) // arange(T)[i] >= arange(T)[j]
    return unsqueezedArange(p->operands[0], 1, t) && unsqueezedArange(p->operands[1], 0, t);
  return false;
}

// Whether `k2` is `k` with its last two axes swapped.
bool swapsLastTwo(const Op &t) {
  if (t.kind != OpKind::Transpose)
    return false;
  if (!t.has("perm"))
    return true; // the default: the last two axes
  const DimList &perm = t.get<DimList>("perm");
  size_t r = perm.size();
  for (size_t a = 0; a < r; ++a) {
    size_t want = a + 2 < r ? a : (a == r - 2 ? r - 1 : r - 2);
    auto p = perm[a]->asConst();
    if (!p || *p != static_cast<int64_t>(want))
      return false;
  }
  return true;
}

// One match: the chain's ops, the operands and attributes of the attention op.
struct Match {
  std::vector<Op *> chain; // the ops it replaces, the last (p @ v) included
  Value *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;
  double scale = 1, fill = 0;
  bool causal = false;
};

class Matcher {
public:
  explicit Matcher(const Region &r) : uses_(countUses(r)) {}

  // The attention that ends in `pv` (a matmul whose first operand a softmax made).
  std::optional<Match> match(Op &pv) {
    Match m;
    if (pv.kind != OpKind::Matmul || !isF32(pv.results[0]))
      return std::nullopt;
    Op *sm = chainDef(pv.operands[0], OpKind::Softmax);
    if (!sm || !isF32(sm->operands[0]))
      return std::nullopt;
    size_t rank = sm->results[0]->type.rank();
    if (rank < 2 || constAttr(*sm, "axis") != static_cast<int64_t>(rank) - 1)
      return std::nullopt;
    m.chain = {&pv, sm};
    Value *s = sm->operands[0];
    const DimList &scores = s->type.dims;
    if (Op *w = chainDef(s, OpKind::Where)) { // where(causal, s, fill)
      auto fill = scalarConstant(w->operands[2]);
      if (!fill || scores[rank - 2] != scores[rank - 1] || !causalPredicate(w->operands[0], scores[rank - 1]) ||
          w->operands[1]->type.dims != scores)
        return std::nullopt;
      m.causal = true, m.fill = *fill;
      m.chain.push_back(w);
      s = w->operands[1];
    }
    if (Op *add = chainDef(s, OpKind::Add)) { // s + mask or mask + s
      size_t side = chainDef(add->operands[0], OpKind::Mul) || chainDef(add->operands[0], OpKind::Matmul) ? 0 : 1;
      Value *chainSide = add->operands[side], *mask = add->operands[1 - side];
      if (!isF32(mask) || chainSide->type.dims != scores || mask->type.rank() > rank)
        return std::nullopt;
      m.mask = mask;
      m.chain.push_back(add);
      s = chainSide;
    }
    if (Op *mul = chainDef(s, OpKind::Mul)) { // s * scale or scale * s
      size_t side = scalarConstant(mul->operands[1]) ? 0 : 1;
      auto scale = scalarConstant(mul->operands[1 - side]);
      if (!scale || mul->operands[side]->type.dims != scores)
        return std::nullopt;
      m.scale = *scale;
      m.chain.push_back(mul);
      s = mul->operands[side];
    }
    Op *qk = chainDef(s, OpKind::Matmul);
    if (!qk)
      return std::nullopt;
    m.chain.push_back(qk);
    m.q = qk->operands[0], m.v = pv.operands[1];
    const Op *t = qk->operands[1]->def;
    if (!t || !swapsLastTwo(*t))
      return std::nullopt;
    m.k = t->operands[0];
    // One rank, the same batch dims, f32: no broadcasting between q, k and v.
    for (const Value *x : {m.q, m.k, m.v})
      if (!isF32(x) || x->type.rank() != rank)
        return std::nullopt;
    for (size_t a = 0; a + 2 < rank; ++a)
      if (m.k->type.dims[a] != m.q->type.dims[a] || m.v->type.dims[a] != m.q->type.dims[a])
        return std::nullopt;
    if (m.k->type.dims[rank - 2] != m.v->type.dims[rank - 2] || pv.results[0]->type.rank() != rank)
      return std::nullopt;
    return m;
  }

private:
  // The op of `kind` that made `x`, when the chain owns x: x is read once (by the next op).
  Op *chainDef(const Value *x, OpKind kind) {
    if (!x->def || x->def->kind != kind || x->def->results.size() != 1 || uses_[x] != 1)
      return nullptr;
    return x->def;
  }

  std::unordered_map<const Value *, int> uses_;
};

// Removes from `r` the ops of `dead` and then every op that only they read (transpose(k),
// the causal predicate, constants), until none is left whose results nothing reads.
void removeDead(Region &r, std::set<const Op *> dead) {
  auto removable = [](const Op &op) {
    switch (op.kind) {
    case OpKind::Transpose: case OpKind::Constant: case OpKind::Arange: case OpKind::Unsqueeze:
    case OpKind::Le: case OpKind::Ge:
      return true;
    default: return false;
    }
  };
  for (;;) {
    r.ops.erase(std::remove_if(r.ops.begin(), r.ops.end(), [&](const Op *op) { return dead.count(op) != 0; }), r.ops.end());
    auto uses = countUses(r);
    dead.clear();
    for (const Op *op : r.ops)
      if (removable(*op) && std::all_of(op->results.begin(), op->results.end(), [&](const Value *v) { return uses[v] == 0; }))
        dead.insert(op);
    if (dead.empty())
      return;
  }
}

} // namespace

int fuseAttention(Graph &g) {
  int made = 0;
  walkRegions(g.body, [&](Region &r) {
    std::set<const Op *> dead;
    std::optional<Matcher> matcher; // the region's use counts, made again after each rewrite
    for (size_t at = 0; at < r.ops.size(); ++at) {
      if (r.ops[at]->kind != OpKind::Matmul)
        continue;
      if (!matcher)
        matcher.emplace(r);
      std::optional<Match> m = matcher->match(*r.ops[at]);
      if (!m)
        continue;
      matcher.reset();
      Op &pv = *r.ops[at];
      Op *att = g.newOp(OpKind::Attention, m->chain[1]->loc); // the softmax's line: where the attention is written
      att->operands = {m->q, m->k, m->v};
      if (m->mask)
        att->operands.push_back(m->mask);
      att->attrs["scale"] = m->scale;
      att->attrs["causal"] = m->causal;
      if (m->causal)
        att->attrs["fill"] = m->fill;
      att->results = {pv.results[0]};
      pv.results[0]->def = att;
      r.ops[at] = att; // where p @ v was: every operand is made before it
      for (size_t c = 1; c < m->chain.size(); ++c)
        dead.insert(m->chain[c]);
      ++made;
    }
    if (!dead.empty())
      removeDead(r, dead);
  });
  return made;
}

} // namespace dnnc::ir
