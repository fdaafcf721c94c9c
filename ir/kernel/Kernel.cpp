// Construction and printing of kernel IR.
#include "ir/kernel/Kernel.h"

#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

namespace dnnc::kir {
namespace {
ValuePtr make(Value v) { return std::make_shared<const Value>(std::move(v)); }
} // namespace

namespace {
StmtPtr makeStmt(Stmt::Kind k) {
  auto s = std::make_unique<Stmt>();
  s->kind = k;
  return s;
}
} // namespace

namespace {
Value base(Value::Kind k, DType t) {
  Value v;
  v.kind = k;
  v.dtype = t;
  return v;
}
} // namespace

ValuePtr constant(double n, DType t) {
  Value v = base(Value::Kind::Const, t);
  v.number = n;
  return make(std::move(v));
}
ValuePtr load(int buffer, sym::ExprRef index, DType t, ValuePtr offset) {
  Value v = base(Value::Kind::Load, t);
  v.buffer = buffer;
  v.index = index;
  if (offset)
    v.args.push_back(std::move(offset));
  return make(std::move(v));
}
ValuePtr indexValue(sym::ExprRef e) {
  Value v = base(Value::Kind::Index, DType::I64);
  v.index = e;
  return make(std::move(v));
}
ValuePtr local(const std::string &name, DType t) {
  Value v = base(Value::Kind::Local, t);
  v.local = name;
  return make(std::move(v));
}
ValuePtr unary(ir::OpKind op, ValuePtr a, DType t) {
  Value v = base(Value::Kind::Unary, t);
  v.op = op;
  v.args = {std::move(a)};
  return make(std::move(v));
}
ValuePtr binary(ir::OpKind op, ValuePtr a, ValuePtr b, DType t) {
  Value v = base(Value::Kind::Binary, t);
  v.op = op;
  v.args = {std::move(a), std::move(b)};
  return make(std::move(v));
}
ValuePtr select(ValuePtr c, ValuePtr a, ValuePtr b) {
  Value v = base(Value::Kind::Select, a->dtype);
  v.args = {std::move(c), std::move(a), std::move(b)};
  return make(std::move(v));
}
ValuePtr cast(ValuePtr a, DType t) {
  if (a->dtype == t)
    return a;
  Value v = base(Value::Kind::Cast, t);
  v.args = {std::move(a)};
  return make(std::move(v));
}

StmtPtr loop(const std::string &var, sym::ExprRef extent, std::vector<StmtPtr> body, Stmt::Schedule s) {
  auto st = makeStmt(Stmt::Kind::For);
  st->var = var;
  st->extent = extent;
  st->body = std::move(body);
  st->schedule = s;
  return st;
}
StmtPtr store(int buffer, sym::ExprRef index, ValuePtr v) {
  auto st = makeStmt(Stmt::Kind::Store);
  st->buffer = buffer;
  st->index = index;
  st->value = std::move(v);
  return st;
}
StmtPtr block(std::vector<StmtPtr> body) {
  auto st = makeStmt(Stmt::Kind::Block);
  st->body = std::move(body);
  return st;
}
StmtPtr let(const std::string &name, ValuePtr v) {
  auto st = makeStmt(Stmt::Kind::Let);
  st->var = name;
  st->value = std::move(v);
  return st;
}
StmtPtr assign(const std::string &name, ValuePtr v) {
  auto st = makeStmt(Stmt::Kind::Assign);
  st->var = name;
  st->value = std::move(v);
  return st;
}
StmtPtr when(ValuePtr cond, std::vector<StmtPtr> body) {
  auto st = makeStmt(Stmt::Kind::If);
  st->value = std::move(cond);
  st->body = std::move(body);
  return st;
}

StmtPtr gemm(Gemm g) {
  auto st = makeStmt(Stmt::Kind::Gemm);
  st->gemm = std::move(g);
  return st;
}

StmtPtr attention(Attention a) {
  auto st = makeStmt(Stmt::Kind::Attention);
  st->attention = std::move(a);
  return st;
}

StmtPtr reduceLoop(const std::string &var, sym::ExprRef extent, std::vector<StmtPtr> body, std::vector<Reduction> reductions) {
  StmtPtr st = loop(var, extent, std::move(body), Stmt::Schedule::Reduce);
  st->reductions = std::move(reductions);
  return st;
}

std::string loopVar(int n) { return "%" + std::to_string(n); }

sym::ExprRef flatIndex(const std::vector<sym::ExprRef> &dims, const std::vector<sym::ExprRef> &idx) {
  sym::ExprRef flat = sym::constant(0), stride = sym::constant(1);
  for (size_t k = dims.size(); k-- > 0;) {
    flat = sym::add(flat, sym::mul(idx[k], stride));
    stride = sym::mul(stride, dims[k]);
  }
  return flat;
}

namespace {
void collectDims(sym::ExprRef e, std::set<std::string> &out) {
  if (!e)
    return;
  for (const std::string &n : sym::freeVars(e))
    if (n[0] != '%')
      out.insert(n);
}
void collectDims(const ValuePtr &v, std::set<std::string> &out) {
  if (!v)
    return;
  collectDims(v->index, out);
  for (const ValuePtr &a : v->args)
    collectDims(a, out);
}
void collectDims(const Stmt &s, std::set<std::string> &out) {
  collectDims(s.extent, out);
  collectDims(s.index, out);
  collectDims(s.value, out);
  if (s.kind == Stmt::Kind::Gemm)
    for (sym::ExprRef e : {s.gemm.aBase, s.gemm.bBase, s.gemm.cBase, s.gemm.lda, s.gemm.ldb, s.gemm.ldc, s.gemm.row0,
                           s.gemm.rows, s.gemm.n, s.gemm.depth, s.gemm.bColStride, s.gemm.packA})
      collectDims(e, out);
  if (s.kind == Stmt::Kind::Gemm && s.gemm.im2col)
    for (sym::ExprRef e : {s.gemm.im2col->height, s.gemm.im2col->width, s.gemm.im2col->outWidth, s.gemm.im2col->column0})
      collectDims(e, out);
  if (s.gemm.epilogue)
    collectDims(*s.gemm.epilogue, out);
  if (s.kind == Stmt::Kind::Attention) {
    const Attention &a = s.attention;
    for (sym::ExprRef e : {a.qBase, a.kBase, a.vBase, a.oBase, a.maskBase, a.maskRow, a.maskCol, a.row0, a.rows, a.keys, a.d, a.dv})
      collectDims(e, out);
  }
  for (const StmtPtr &b : s.body)
    collectDims(*b, out);
}

void printStmt(const Kernel &k, const Stmt &s, int depth, std::string &out) {
  std::string pad(depth * 2, ' ');
  const char *sched[] = {"", " parallel", " vectorize", " reduce"};
  switch (s.kind) {
  case Stmt::Kind::For: {
    std::string combines;
    for (const Reduction &r : s.reductions)
      combines += fmt::format("{}{} by {}{}", combines.empty() ? "(" : ", ", r.local, ir::opInfo(r.combine).spelling,
                              r.argLocal.empty() ? "" : " at " + r.argLocal);
    out += fmt::format("{}for {} in 0..{}{}{} {{\n", pad, s.var, s.extent->str(), sched[static_cast<int>(s.schedule)],
                       combines.empty() ? "" : combines + ")");
    for (const StmtPtr &b : s.body)
      printStmt(k, *b, depth + 1, out);
    out += pad + "}\n";
    break;
  }
  case Stmt::Kind::Store:
    out += fmt::format("{}b{}[{}] = {}\n", pad, s.buffer, s.index->str(), print(*s.value));
    break;
  case Stmt::Kind::Block:
    for (const StmtPtr &b : s.body)
      printStmt(k, *b, depth, out);
    break;
  case Stmt::Kind::Let: out += fmt::format("{}let {}: {} = {}\n", pad, s.var, dtypeName(s.value->dtype), print(*s.value)); break;
  case Stmt::Kind::Assign: out += fmt::format("{}{} = {}\n", pad, s.var, print(*s.value)); break;
  case Stmt::Kind::If:
    out += fmt::format("{}if {} {{\n", pad, print(*s.value));
    for (const StmtPtr &b : s.body)
      printStmt(k, *b, depth + 1, out);
    out += pad + "}\n";
    break;
  case Stmt::Kind::Gemm: {
    const Gemm &g = s.gemm;
    out += fmt::format("{}gemm tiled rows [{}, {} + {}) cols {} depth {}:\n", pad, g.row0->str(), g.row0->str(),
                       g.rows->str(), g.n->str(), g.depth->str());
    if (g.packA)
      out += fmt::format("{}  A packed when {} != 0\n", pad, g.packA->str());
    if (g.im2col) {
      const Gemm::Im2col &x = *g.im2col;
      out += fmt::format("{}  b{}[{} + i*{} + j] = sum_k b{}[{} + i*{} + k] * im2col(b{}[{} + ci*{}*{} + ih*{} + iw]), "
                         "k = (ci*{} + ki)*{} + kj, p = {} + j = oh*{} + ow, ih = oh*{} + ki*{} - {}, iw = ow*{} + kj*{} - {} "
                         "(0 outside the image)\n",
                         pad, g.c, g.cBase->str(), g.ldc->str(), g.a, g.aBase->str(), g.lda->str(), g.b, g.bBase->str(), x.height->str(),
                         x.width->str(), x.width->str(), x.kh, x.kw, x.column0->str(), x.outWidth->str(), x.stride, x.dilation, x.padding,
                         x.stride, x.dilation, x.padding);
    } else if (g.bPanels)
      out += fmt::format("{}  b{}[{} + i*{} + j] = sum_k b{}[{} + i*{} + k] * b{}(k, {} + j) (prepacked in panels of {} columns)\n", pad,
                         g.c, g.cBase->str(), g.ldc->str(), g.a, g.aBase->str(), g.lda->str(), g.b, g.bBase->str(), kPanelColumns);
    else
      out += fmt::format("{}  b{}[{} + i*{} + j] = sum_k b{}[{} + i*{} + k] * b{}[{} + k*{} + j{}]{}\n", pad, g.c, g.cBase->str(),
                         g.ldc->str(), g.a, g.aBase->str(), g.lda->str(), g.b, g.bBase->str(), g.ldb->str(),
                         g.bColStride ? "*" + g.bColStride->str() : "", g.dotProducts ? " (dot products)" : "");
    if (g.epilogue) {
      out += pad + "  then:\n";
      printStmt(k, *g.epilogue, depth + 2, out);
    }
    break;
  }
  case Stmt::Kind::Attention: {
    const Attention &a = s.attention;
    out += fmt::format("{}attention rows [{}, {} + {}) in blocks of {} keys {}{} d {} dv {} scale {}:\n", pad, a.row0->str(), a.row0->str(),
                       a.rows->str(), a.rowBlock, a.keys->str(), a.causal ? fmt::format(" (causal: j <= i, else {})", a.fill) : "", a.d->str(), a.dv->str(), a.scale);
    out += fmt::format("{}  s(i, j) = sum_x b{}[{} + i*{} + x] * b{}[{} + j*{} + x] * scale", pad, a.q, a.qBase->str(), a.d->str(),
                       a.k, a.kBase->str(), a.d->str());
    if (a.mask >= 0)
      out += fmt::format(" + b{}[{} + i*{} + j*{}]", a.mask, a.maskBase->str(), a.maskRow->str(), a.maskCol->str());
    out += fmt::format("\n{}  b{}[{} + i*{} + y] = sum_j softmax_j(s(i, .)) * b{}[{} + j*{} + y]\n", pad, a.o, a.oBase->str(),
                       a.dv->str(), a.v, a.vBase->str(), a.dv->str());
    break;
  }
  }
}
} // namespace

const Stmt *Kernel::parallelLoop() const {
  return body->kind == Stmt::Kind::For && body->schedule == Stmt::Schedule::Parallel ? body.get() : nullptr;
}

std::vector<const Stmt *> Kernel::parallelNest() const {
  std::vector<const Stmt *> nest;
  std::set<std::string> vars;
  for (const Stmt *s = parallelLoop(); s;) {
    nest.push_back(s);
    vars.insert(s->var);
    const Stmt *inner = s->body.size() == 1 ? s->body[0].get() : nullptr;
    if (!inner || inner->kind != Stmt::Kind::For || inner->schedule != Stmt::Schedule::Parallel)
      break;
    // A range that depends on an outer index is no rectangle to collapse.
    auto uses = sym::freeVars(inner->extent);
    if (std::any_of(uses.begin(), uses.end(), [&](const std::string &v) { return vars.count(v) != 0; }))
      break;
    s = inner;
  }
  return nest;
}

namespace {
// Whether `index` names a different element for each value of `var`: var appears in one
// term only, as var times a (nonzero) constant, and inside no division, remainder, min or max.
bool injectiveIn(sym::ExprRef index, const std::string &var) {
  bool found = false;
  for (const sym::Term &t : index->terms()) {
    bool hasVar = false;
    for (const sym::Atom *a : t.factors) {
      if (a->kind == sym::Atom::Kind::Var) {
        hasVar = hasVar || a->name == var;
        continue;
      }
      for (sym::ExprRef side : {a->lhs, a->rhs}) {
        std::vector<std::string> names = side ? sym::freeVars(side) : std::vector<std::string>{};
        if (std::find(names.begin(), names.end(), var) != names.end())
          return false;
      }
    }
    if (hasVar && (found || t.factors.size() != 1))
      return false;
    found = found || hasVar;
  }
  return found;
}
} // namespace

bool independentIterations(const Stmt &s) {
  std::map<int, sym::ExprRef> stored;
  std::vector<const Value *> loads;
  bool ok = true;
  std::function<void(const Value &)> read = [&](const Value &v) {
    if (v.kind == Value::Kind::Load)
      loads.push_back(&v);
    for (const auto &a : v.args)
      read(*a);
  };
  std::function<void(const Stmt &)> walk = [&](const Stmt &c) {
    switch (c.kind) {
    case Stmt::Kind::Store: {
      auto [at, fresh] = stored.emplace(c.buffer, c.index);
      ok = ok && (fresh || at->second == c.index) && injectiveIn(c.index, s.var);
      return read(*c.value);
    }
    case Stmt::Kind::Let:
    case Stmt::Kind::Assign: return read(*c.value);
    case Stmt::Kind::If: read(*c.value); [[fallthrough]];
    case Stmt::Kind::Block:
      for (const auto &b : c.body)
        walk(*b);
      return;
    case Stmt::Kind::For:
    case Stmt::Kind::Gemm:
    case Stmt::Kind::Attention: ok = false; return;
    }
  };
  for (const auto &c : s.body)
    walk(*c);
  return ok && std::all_of(loads.begin(), loads.end(), [&](const Value *l) {
           auto at = stored.find(l->buffer);
           return at == stored.end() || (at->second == l->index && l->args.empty());
         });
}

std::vector<std::string> Kernel::dims() const {
  std::set<std::string> out;
  for (const Buffer &b : buffers)
    for (sym::ExprRef d : b.dims)
      collectDims(d, out);
  collectDims(*body, out);
  return {out.begin(), out.end()};
}

size_t Kernel::argumentBuffers() const {
  return static_cast<size_t>(std::count_if(buffers.begin(), buffers.end(), [](const Buffer &b) { return !b.local; }));
}

std::string print(const Value &v) {
  auto arg = [&](size_t i) { return print(*v.args[i]); };
  switch (v.kind) {
  case Value::Kind::Const: return fmt::format("{}", v.number);
  case Value::Kind::Load:
    return fmt::format("b{}[{}{}]", v.buffer, v.index->str(), v.args.empty() ? "" : " + " + arg(0));
  case Value::Kind::Index: return "(" + v.index->str() + ")";
  case Value::Kind::Local: return v.local;
  case Value::Kind::Unary: return fmt::format("{}({})", ir::opInfo(v.op).spelling, arg(0));
  case Value::Kind::Binary: return fmt::format("{}({}, {})", ir::opInfo(v.op).spelling, arg(0), arg(1));
  case Value::Kind::Select: return fmt::format("select({}, {}, {})", arg(0), arg(1), arg(2));
  case Value::Kind::Cast: return fmt::format("{}({})", dtypeName(v.dtype), arg(0));
  }
  return "?";
}

std::string print(const Kernel &k) {
  std::string out = "kernel " + k.name + "(";
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    const Buffer &b = k.buffers[i];
    ir::TensorType t{b.dtype, b.dims};
    out += fmt::format("{}{}b{} {}: {}", i ? ", " : "", b.output ? "out " : b.local ? "local " : "", i, b.name, t.str());
  }
  out += ") {\n";
  printStmt(k, *k.body, 1, out);
  return out + "}\n";
}

} // namespace dnnc::kir
