// Lowering of each op kind to a loop nest (see Lower.h for the contract).
#include "backend/lower/Lower.h"

#include "backend/gpu/GpuMapping.h"
#include "backend/lower/Schedule.h"
#include "base/Error.h"
#include "ir/graph/OpRegistry.h"
#include "runtime/GemmSelect.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

namespace dnnc::lower {
namespace {

using ir::OpKind;
using kir::Stmt;
using kir::StmtPtr;
using kir::ValuePtr;
using sym::ExprRef;
using Dims = std::vector<ExprRef>;

ExprRef c(int64_t v) { return sym::constant(v); }

// A prepacked B of this many columns is stored transposed (ir::kNarrowColumns).
bool isNarrow(ExprRef columns) { return columns->asConst() && *columns->asConst() <= ir::kNarrowColumns; }

// Terms per block of a blocked f32 sum (Lowering::blockedSum).
constexpr int64_t kSumBlock = 4096;
// Rows a column reduction's vector loop takes per pass (Lowering::columnReduction).
constexpr int64_t kRowsPerPass = 4;

// A reduced axis of this extent is summed in blocks; their count, and block b's terms.
bool sumBlocked(ExprRef extent) { return !(extent->asConst() && *extent->asConst() <= kSumBlock); }
ExprRef sumBlocks(ExprRef extent) { return sym::floorDiv(sym::add(extent, c(kSumBlock - 1)), c(kSumBlock)); }
ExprRef sumBlockLength(ExprRef extent, ExprRef b) { return sym::min(c(kSumBlock), sym::sub(extent, sym::mul(b, c(kSumBlock)))); }

// Whether a later f32 value x replaces the best so far of a max (else min) scan: where it
// is better, or the first NaN (NaN beats any number and the first NaN stays, as in NumPy);
// equal values keep the earlier.
ValuePtr replacesBest(bool wantMax, ValuePtr x, ValuePtr best) {
  ValuePtr better = kir::binary(wantMax ? OpKind::Gt : OpKind::Lt, x, best, DType::Bool);
  ValuePtr firstNaN = kir::binary(OpKind::And, kir::binary(OpKind::Ne, x, x, DType::Bool), kir::binary(OpKind::Eq, best, best, DType::Bool),
                                  DType::Bool);
  return kir::binary(OpKind::Or, better, firstNaN, DType::Bool);
}

// Lowers one op, or a fused op's group: then the kernel's buffers are the fused op's
// operands and results, `op_` is the group's root (the op whose result the group yields),
// and the root's operands made inside the group are computed where they are read
// (readValue), never stored.
class Lowering {
public:
  Lowering(const ir::Op &op, const std::string &name, const ScheduleOptions &schedule)
      : outer_(op), op_(op.kind == OpKind::Fused ? *op.regions[0]->yields[0]->def : op), schedule_(schedule) {
    k_.name = name;
    for (const ir::Value *v : op.operands)
      k_.buffers.push_back({v->name.empty() ? fmt::format("v{}", v->id) : v->name, v->type.dtype, v->type.dims, false});
    for (const ir::Value *v : op.results)
      k_.buffers.push_back({v->name.empty() ? fmt::format("v{}", v->id) : v->name, v->type.dtype, v->type.dims, true});
  }

  // Buffer b: an operand of the op (the fused op's, for a group), or out(k).
  const Dims &dims(int b) const { return k_.buffers[b].dims; }
  DType dtype(int b) const { return k_.buffers[b].dtype; }
  int out(int k = 0) const { return static_cast<int>(outer_.operands.size()) + k; }
  // The root's operand b (the same as buffer b unless the op is fused).
  const Dims &in(int b) const { return op_.operands[b]->type.dims; }
  DType inType(int b) const { return op_.operands[b]->type.dtype; }
  ValuePtr read(int b, const Dims &idx) { return readValue(op_.operands[b], idx); }
  ValuePtr readValue(const ir::Value *v, const Dims &idx);
  // The kernel buffer holding v: the op's operand, or the fused op's region argument.
  int bufferOf(const ir::Value *v) const;
  int64_t intAttr(const std::string &n) const { return intAttrOf(op_, n); }
  static int64_t intAttrOf(const ir::Op &op, const std::string &n) {
    const ir::Attr &a = op.attrs.at(n);
    if (auto *i = std::get_if<int64_t>(&a))
      return *i;
    return *std::get<ExprRef>(a)->asConst();
  }
  std::vector<int64_t> listAttr(const std::string &n) const {
    std::vector<int64_t> out;
    for (ExprRef e : op_.get<ir::DimList>(n)) {
      auto v = e->asConst();
      if (!v)
        throw InternalError(fmt::format("'{}' of {} is {}, not a constant", n, ir::opInfo(op_.kind).spelling, e->str()));
      out.push_back(*v);
    }
    return out;
  }
  size_t axisAttr(const std::string &n) const { return static_cast<size_t>(intAttr(n)); } // non-negative after sema

  // Fresh loop variables for every axis of `shape`.
  Dims vars(size_t n) {
    Dims v;
    for (size_t k = 0; k < n; ++k)
      v.push_back(sym::var(kir::loopVar(next_++)));
    return v;
  }

  // The index into a tensor of dims `d` that NumPy broadcasting reads at output index
  // `idx` (trailing axes align; literal-1 dims repeat).
  static Dims broadcastIdx(const Dims &d, const Dims &idx) {
    Dims in;
    for (size_t k = 0; k < d.size(); ++k)
      in.push_back(d[k]->asConst() == 1 ? c(0) : idx[idx.size() - d.size() + k]);
    return in;
  }
  ExprRef broadcastIndex(int b, const Dims &idx) { return kir::flatIndex(dims(b), broadcastIdx(dims(b), idx)); }
  // The index into a reshape's input (dims `d`) of element `idx` of its output (dims `o`).
  // Dims are matched in groups of equal size from the right (T with T, 4 x 64 with 256),
  // so each group's index is flattened and split only where dims split or merge: no
  // division for dims that carry over, as the whole flat index would need.
  static Dims reshapeIndex(const Dims &o, const Dims &d, const Dims &idx) {
    std::map<std::string, int64_t> probe; // orders sizes while the groups grow
    for (const Dims *dims : {&o, &d})
      for (ExprRef e : *dims)
        for (const std::string &n : sym::freeVars(e))
          probe[n] = 7919;
    auto size = [&](ExprRef e) { return sym::evaluate(e, probe).value_or(0); };
    Dims at(d.size());
    size_t i = o.size(), j = d.size();
    while (i > 0 || j > 0) {
      size_t iEnd = i, jEnd = j;
      ExprRef po = c(1), pd = c(1);
      // Grow whichever side is smaller until the two products are the same expression.
      do {
        if (j == 0 || (i > 0 && size(po) <= size(pd)))
          po = sym::mul(po, o[--i]);
        else
          pd = sym::mul(pd, d[--j]);
      } while ((po != pd || (i > 0 && o[i - 1]->asConst() == 1) || (j > 0 && d[j - 1]->asConst() == 1)) && (i > 0 || j > 0));
      if (po != pd)
        return genericReshapeIndex(o, d, idx);
      ExprRef flat = c(0), stride = c(1);
      for (size_t k = iEnd; k-- > i;) {
        flat = sym::add(flat, sym::mul(idx[k], stride));
        stride = sym::mul(stride, o[k]);
      }
      // Divided one dim at a time, ((flat/W)/H rather than flat/(H*W)), so that where
      // the reader's index multiplies them back the terms fold to flat again (sym::add).
      ExprRef q = flat;
      for (size_t k = jEnd; k-- > j; q = sym::floorDiv(q, d[k]))
        at[k] = k == j ? q : sym::mod(q, d[k]); // the group's first dim needs no wrap
    }
    return at;
  }
  static Dims genericReshapeIndex(const Dims &o, const Dims &d, const Dims &idx) {
    ExprRef q = kir::flatIndex(o, idx);
    Dims at(d.size());
    for (size_t k = d.size(); k-- > 0; q = sym::floorDiv(q, d[k]))
      at[k] = sym::mod(q, d[k]);
    return at;
  }

  // The scalar function of an elementwise op on its operands' values.
  static ValuePtr scalarOf(const ir::Op &op, const std::vector<ValuePtr> &in, DType t) {
    switch (op.kind) {
    case OpKind::Where: return kir::select(in[0], in[1], in[2]);
    case OpKind::Clip: return extremum(OpKind::Minimum, extremum(OpKind::Maximum, in[0], in[1], t), in[2], t);
    case OpKind::Maximum: case OpKind::Minimum: return extremum(op.kind, in[0], in[1], t);
    case OpKind::Cast: return kir::cast(in[0], t);
    default: return in.size() == 1 ? kir::unary(op.kind, in[0], t) : kir::binary(op.kind, in[0], in[1], t);
    }
  }
  // maximum(a, b) or minimum(a, b): of floats, NaN propagating and equal values keeping
  // the first, as the reference interpreter and the reductions' scans give them (-0 and
  // +0). The kernels' own Maximum, which reductions accumulate with (a max reduction the
  // vectorizer recognizes), orders -0 below +0 instead: an elementwise op is not that.
  static ValuePtr extremum(OpKind kind, const ValuePtr &a, const ValuePtr &b, DType t) {
    if (!isFloat(t))
      return kir::binary(kind, a, b, t);
    return kir::select(replacesBest(kind == OpKind::Maximum, b, a), b, a);
  }
  ValuePtr loadAt(int b, const Dims &idx) { return kir::load(b, kir::flatIndex(dims(b), idx), dtype(b)); }

  std::optional<kir::Kernel> run();

private:
  StmtPtr elementwise();
  StmtPtr rows();
  StmtPtr reduction();
  // The input dims `in` a reduction loops over, and how it reads an element at them:
  // trailing reduced axes (H and W of a mean over [N, C, H, W]) become one, of their
  // product, where the element's index then folds back to one contiguous run (the vector
  // loop loads lanes in a row, not a gather down a column per lane); `reduced` is
  // renumbered to match. The order of the terms stays row-major, so only float sums, whose
  // blocks then span the run, see a difference (docs/semantics.md). Unchanged where an
  // index would still divide the run's position (a broadcast along one of its axes).
  std::pair<Dims, std::function<ValuePtr(const Dims &)>> flattenTrailing(const Dims &in, std::set<size_t> &reduced);
  // A sum, mean, max or min over a run of axes that kept axes follow (see its comment);
  // null where it does not apply.
  StmtPtr columnReduction(const std::set<size_t> &reduced);
  // Appends to `body` the statements that leave in local `total` the blocked f32 sum (see
  // reduction()) over the `reduced` axes of a tensor of dims `in` of term(at), where `at`
  // is `idx` with the reduced axes' loop variables in place.
  void blockedSum(const Dims &in, const Dims &idx, const std::set<size_t> &reduced, const std::string &total,
                  const std::function<ValuePtr(const Dims &)> &term, std::vector<StmtPtr> &body);
  StmtPtr softmax();
  StmtPtr matmul(const ir::Op &mm);
  // A conv2d as the implicit GEMM of a fused group (ir::FusionKind::ConvEpilogue), the
  // group's elementwise ops its epilogue.
  StmtPtr convGemm(const ir::Op &conv);
  StmtPtr attention();
  StmtPtr window(bool conv);
  StmtPtr copyFlat();
  // With `panels`, stores the [K, N] result in the prepacked GEMM panels (kir::Gemm::bPanels),
  // or transposed where N is at most ir::kNarrowColumns (read as dot products).
  StmtPtr transpose(bool panels = false);
  StmtPtr concat(bool stack);
  StmtPtr split();
  struct PartNests;
  StmtPtr pad();
  StmtPtr take(size_t axis);
  StmtPtr index();

  const ir::Op &outer_; // the op the kernel computes (a fused op, or op_ itself)
  const ir::Op &op_;    // the op whose semantics the loop nest follows
  const ScheduleOptions &schedule_; // the target's
  kir::Kernel k_;
  int next_ = 0;
  std::map<const ir::Value *, std::string> rowLocals_; // a row group's reductions: the local each is in
};

StmtPtr Lowering::elementwise() {
  if (outer_.kind == OpKind::Fused &&
      std::any_of(outer_.regions[0]->ops.begin(), outer_.regions[0]->ops.end(), [](const ir::Op *p) { return ir::isReduction(p->kind); }))
    return rows();
  const Dims &shape = dims(out());
  Dims idx = vars(shape.size());
  std::vector<ValuePtr> values;
  for (size_t b = 0; b < op_.operands.size(); ++b)
    values.push_back(read(static_cast<int>(b), broadcastIdx(in(static_cast<int>(b)), idx)));
  return loopNest(shape, idx, one(kir::store(out(), kir::flatIndex(shape, idx), scalarOf(op_, values, dtype(out())))));
}

// A row group (ir/transforms/Fusion.h): per row, each of its sums and means over the last
// axis in program order (a later one may read an earlier: the variance reads the mean)
// into a local, which readValue gives wherever the reduction's result is read; then the
// root's elements of the row. One pass over the row per reduction and one for the result,
// reading it from cache after the first.
StmtPtr Lowering::rows() {
  const Dims &shape = dims(out());
  Dims idx = vars(shape.size());
  Dims rowShape(shape.begin(), shape.end() - 1), rowIdx(idx.begin(), idx.end() - 1);
  std::vector<StmtPtr> body;
  for (const ir::Op *p : outer_.regions[0]->ops) {
    if (!ir::isReduction(p->kind))
      continue;
    if (p->kind != OpKind::Sum && p->kind != OpKind::Mean)
      throw InternalError(fmt::format("{}: a row group reduces only by sum and mean, not {}", k_.name, ir::opInfo(p->kind).spelling));
    std::string local = fmt::format("row{}", rowLocals_.size());
    blockedSum(shape, idx, {shape.size() - 1}, local, [&](const Dims &at) { return readValue(p->operands[0], at); }, body);
    if (p->kind == OpKind::Mean) // an empty mean is 0 / 0: NaN, as reduction()'s
      body.push_back(kir::assign(local, kir::binary(OpKind::Div, kir::local(local, DType::F32),
                                                    kir::cast(kir::indexValue(shape.back()), DType::F32), DType::F32)));
    rowLocals_[p->results[0]] = local;
  }
  body.push_back(kir::loop(idx.back()->asVar()->name, shape.back(),
                           one(kir::store(out(), kir::flatIndex(shape, idx), readValue(op_.results[0], idx))), Stmt::Schedule::Vectorize));
  return loopNest(rowShape, rowIdx, std::move(body));
}

int Lowering::bufferOf(const ir::Value *v) const {
  const auto &sources = outer_.kind == OpKind::Fused ? outer_.regions[0]->args : outer_.operands;
  auto at = std::find(sources.begin(), sources.end(), v);
  if (at == sources.end())
    throw InternalError(fmt::format("{}: %{} is neither an operand nor made in the kernel", k_.name, v->id));
  return static_cast<int>(at - sources.begin());
}

ValuePtr Lowering::readValue(const ir::Value *v, const Dims &idx) {
  const ir::Op *p = v->def;
  bool member = outer_.kind == OpKind::Fused && p && v->owner == nullptr &&
                std::find(outer_.regions[0]->ops.begin(), outer_.regions[0]->ops.end(), p) != outer_.regions[0]->ops.end();
  if (!member) // a buffer: the fused op's operand (its region's argument), or the op's own
    return kir::load(bufferOf(v), kir::flatIndex(v->type.dims, idx), v->type.dtype);
  if (p->kind == OpKind::Matmul || p->kind == OpKind::Conv2d) // a fused GEMM has already written it to the output
    return kir::load(out(), kir::flatIndex(v->type.dims, idx), v->type.dtype);
  if (auto row = rowLocals_.find(v); row != rowLocals_.end()) // this row's, computed first
    return kir::local(row->second, DType::F32);
  const Dims &o = v->type.dims;
  auto operandDims = [&](size_t k) -> const Dims & { return p->operands[k]->type.dims; };
  switch (p->kind) {
  case OpKind::Transpose: {
    size_t rank = operandDims(0).size();
    std::vector<size_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    if (p->has("perm")) {
      const auto &list = p->get<ir::DimList>("perm");
      for (size_t k = 0; k < list.size(); ++k)
        perm[k] = static_cast<size_t>(*list[k]->asConst());
    } else {
      std::swap(perm[rank - 1], perm[rank - 2]);
    }
    Dims at(rank);
    for (size_t k = 0; k < rank; ++k)
      at[perm[k]] = idx[k];
    return readValue(p->operands[0], at);
  }
  case OpKind::BroadcastTo: return readValue(p->operands[0], broadcastIdx(operandDims(0), idx));
  case OpKind::Reshape: case OpKind::Unsqueeze: case OpKind::Squeeze: case OpKind::Flatten:
    return readValue(p->operands[0], reshapeIndex(o, operandDims(0), idx));
  case OpKind::Index: {
    ir::IndexAttrs ix = ir::IndexAttrs::of(*p);
    const Dims &d = operandDims(0);
    Dims at;
    size_t next = 0;
    for (size_t a = 0; a < d.size(); ++a) {
      if (ix.isPoint(a)) {
        at.push_back(ix.starts[a]);
        continue;
      }
      ExprRef begin = sym::max(c(0), sym::min(ix.starts[a], d[a]));
      at.push_back(sym::add(begin, sym::mul(idx[next++], ix.steps[a])));
    }
    return readValue(p->operands[0], at);
  }
  case OpKind::Arange:
    return kir::cast(kir::indexValue(sym::add(p->get<ExprRef>("start"), sym::mul(idx[0], p->get<ExprRef>("step")))), v->type.dtype);
  case OpKind::Zeros: return kir::constant(0, v->type.dtype);
  case OpKind::Ones: return kir::constant(1, v->type.dtype);
  case OpKind::Full: return kir::constant(p->get<double>("value"), v->type.dtype);
  default: {
    std::vector<ValuePtr> values;
    for (size_t k = 0; k < p->operands.size(); ++k)
      values.push_back(readValue(p->operands[k], broadcastIdx(operandDims(k), idx)));
    return scalarOf(*p, values, v->type.dtype);
  }
  }
}

// Float sums are blocked: each reduced axis longer than kSumBlock is split into blocks
// whose partial sums are added to the total, and each iteration of an outer reduced axis
// adds the fresh partial of the axes inside it. A serial f32 sum of n terms has an error
// bound of n * eps (2^25 ones sum to 2^24); this one's is about (kSumBlock + n / kSumBlock)
// * eps per axis. The oracle sums in double (docs/semantics.md). `term(idx)` is the value
// added at input index idx; the outermost loop over elements is the GPU lanes' Reduce loop.
void Lowering::blockedSum(const Dims &in, const Dims &idx, const std::set<size_t> &reduced, const std::string &total,
                          const std::function<ValuePtr(const Dims &)> &term, std::vector<StmtPtr> &body) {
  Dims at = idx;
  std::vector<size_t> redAxes;
  for (size_t a = 0; a < in.size(); ++a)
    if (reduced.count(a))
      redAxes.push_back(a);
  // Statements adding the sum over reduced axes k.. into local `target`.
  std::function<StmtPtr(size_t, const std::string &)> level = [&](size_t k, const std::string &target) -> StmtPtr {
    size_t a = redAxes[k];
    ExprRef extent = in[a];
    bool blocked = sumBlocked(extent);
    std::string partial = fmt::format("sum.p{}", k), inner = fmt::format("sum.q{}", k);
    ExprRef block = blocked ? sym::var(kir::loopVar(next_++)) : nullptr, j = sym::var(kir::loopVar(next_++));
    at[a] = blocked ? sym::add(sym::mul(block, c(kSumBlock)), j) : j;
    std::string into = blocked ? partial : target;
    // One iteration's value: the term, or the fresh partial of the axes inside.
    std::vector<StmtPtr> iteration;
    if (k + 1 == redAxes.size()) {
      iteration.push_back(kir::assign(into, kir::binary(OpKind::Add, kir::local(into, DType::F32), term(at), DType::F32)));
    } else {
      iteration.push_back(kir::let(inner, kir::constant(0, DType::F32)));
      iteration.push_back(level(k + 1, inner));
      iteration.push_back(kir::assign(into, kir::binary(OpKind::Add, kir::local(into, DType::F32), kir::local(inner, DType::F32), DType::F32)));
    }
    ExprRef elements = blocked ? sumBlockLength(extent, block) : extent;
    StmtPtr elementLoop = k == 0 ? kir::reduceLoop(j->asVar()->name, elements, std::move(iteration), {{into, OpKind::Add, ""}})
                                 : kir::loop(j->asVar()->name, elements, std::move(iteration));
    if (!blocked)
      return elementLoop;
    std::vector<StmtPtr> perBlock;
    perBlock.push_back(kir::let(partial, kir::constant(0, DType::F32)));
    perBlock.push_back(std::move(elementLoop));
    perBlock.push_back(kir::assign(target, kir::binary(OpKind::Add, kir::local(target, DType::F32), kir::local(partial, DType::F32), DType::F32)));
    return kir::loop(block->asVar()->name, sumBlocks(extent), std::move(perBlock));
  };
  body.push_back(kir::let(total, kir::constant(0, DType::F32)));
  if (!redAxes.empty())
    body.push_back(level(0, total));
  else
    body.push_back(kir::assign(total, term(at)));
}

namespace {
// Whether e divides, or takes a remainder of, an expression of loop variable `var`.
bool dividesVar(ExprRef e, const std::string &var) {
  for (const sym::Term &t : e->terms())
    for (const sym::Atom *f : t.factors) {
      if (f->kind == sym::Atom::Kind::Var)
        continue;
      if (f->kind == sym::Atom::Kind::Div || f->kind == sym::Atom::Kind::Mod) {
        for (ExprRef side : {f->lhs, f->rhs})
          for (const std::string &n : sym::freeVars(side))
            if (n == var)
              return true;
      } else if (dividesVar(f->lhs, var) || dividesVar(f->rhs, var)) {
        return true;
      }
    }
  return false;
}
// Whether any index v loads at (or computes) divides loop variable `var` (dividesVar).
bool dividesVar(const kir::Value &v, const std::string &var) {
  if (v.index && dividesVar(v.index, var))
    return true;
  for (const ValuePtr &a : v.args)
    if (a && dividesVar(*a, var))
      return true;
  return false;
}
} // namespace

std::pair<Dims, std::function<ValuePtr(const Dims &)>> Lowering::flattenTrailing(const Dims &in, std::set<size_t> &reduced) {
  std::function<ValuePtr(const Dims &)> direct = [this](const Dims &at) { return read(0, at); };
  size_t run = in.size();
  while (run > 0 && reduced.count(run - 1))
    --run;
  if (in.size() - run < 2)
    return {in, direct};
  std::function<ValuePtr(const Dims &)> flat = [this, in, run](const Dims &at) {
    Dims full(at.begin(), at.begin() + run);
    full.resize(in.size());
    ExprRef q = at[run];
    for (size_t k = in.size(); k-- > run; q = sym::floorDiv(q, in[k]))
      full[k] = k == run ? q : sym::mod(q, in[k]);
    return read(0, full);
  };
  Dims probe, flatDims(in.begin(), in.begin() + run);
  ExprRef elements = c(1);
  for (size_t a = run; a < in.size(); ++a)
    elements = sym::mul(elements, in[a]);
  flatDims.push_back(elements);
  auto numbered = next_; // the probe's loop variables are not the kernel's
  for (size_t a = 0; a <= run; ++a)
    probe.push_back(sym::var(kir::loopVar(next_++)));
  bool divides = dividesVar(*flat(probe), probe.back()->asVar()->name);
  next_ = numbered;
  if (divides)
    return {in, direct};
  for (size_t a = run + 1; a < in.size(); ++a)
    reduced.erase(a);
  return {flatDims, flat};
}

StmtPtr Lowering::reduction() {
  std::vector<size_t> axes;
  if (!op_.has("axis")) {
    axes.resize(this->in(0).size());
    std::iota(axes.begin(), axes.end(), 0);
  } else {
    for (int64_t a : listAttr("axis"))
      axes.push_back(static_cast<size_t>(a));
  }
  std::set<size_t> reduced(axes.begin(), axes.end());
  if (StmtPtr columns = columnReduction(reduced))
    return columns;
  auto [in, readIn] = flattenTrailing(this->in(0), reduced);
  Dims keptShape, keptIdx, redShape, redIdx, inIdx(in.size());
  for (size_t a = 0; a < in.size(); ++a) {
    ExprRef v = sym::var(kir::loopVar(next_++));
    inIdx[a] = v;
    (reduced.count(a) ? redShape : keptShape).push_back(in[a]);
    (reduced.count(a) ? redIdx : keptIdx).push_back(v);
  }
  ValuePtr x = readIn(inIdx);
  DType acc = isFloat(inType(0)) ? DType::F32 : DType::I64;
  DType t = dtype(out());
  OpKind kind = op_.kind;
  ExprRef outFlat = kir::flatIndex(keptShape, keptIdx); // keepdims only inserts 1s: same flat index
  std::vector<StmtPtr> body;
  // The reduced loops fold into scalar locals; the outermost is the one a GPU warp splits.
  auto accumulate = [&](StmtPtr update, std::vector<kir::Reduction> reductions) {
    StmtPtr s = kir::block(one(std::move(update)));
    for (size_t k = redShape.size(); k-- > 0;)
      s = k == 0 ? kir::reduceLoop(redIdx[k]->asVar()->name, redShape[k], one(std::move(s)), std::move(reductions))
                 : kir::loop(redIdx[k]->asVar()->name, redShape[k], one(std::move(s)));
    return s;
  };
  ExprRef count = c(1);
  for (ExprRef d : redShape)
    count = sym::mul(count, d);
  switch (kind) {
  case OpKind::Sum:
  case OpKind::Mean:
    if (acc == DType::F32) {
      blockedSum(in, inIdx, reduced, "acc", [&](const Dims &at) { return kir::cast(readIn(at), DType::F32); }, body);
      ValuePtr r = kir::local("acc", acc);
      if (kind == OpKind::Mean) // an empty mean is 0 / 0: NaN
        r = kir::binary(OpKind::Div, r, kir::cast(kir::indexValue(count), DType::F32), DType::F32);
      body.push_back(kir::store(out(), outFlat, kir::cast(r, t)));
      break;
    }
    [[fallthrough]];
  case OpKind::Prod: {
    bool prod = kind == OpKind::Prod;
    body.push_back(kir::let("acc", kir::constant(prod ? 1 : 0, acc)));
    body.push_back(accumulate(kir::assign("acc", kir::binary(prod ? OpKind::Mul : OpKind::Add, kir::local("acc", acc),
                                                             kir::cast(x, acc), acc)),
                                 {{"acc", prod ? OpKind::Mul : OpKind::Add, ""}}));
    ValuePtr r = kir::local("acc", acc);
    if (kind == OpKind::Mean) // of integers: the exact i64 sum divided in f32, not floor division
      r = kir::binary(OpKind::Div, kir::cast(r, DType::F32), kir::cast(kir::indexValue(count), DType::F32), DType::F32);
    body.push_back(kir::store(out(), outFlat, kir::cast(r, t)));
    break;
  }
  case OpKind::Max:
  case OpKind::Min:
  case OpKind::Argmax:
  case OpKind::Argmin: {
    bool wantMax = kind == OpKind::Max || kind == OpKind::Argmax;
    double init = acc == DType::F32 ? (wantMax ? -INFINITY : INFINITY)
                                    : (wantMax ? static_cast<double>(std::numeric_limits<int64_t>::min())
                                               : static_cast<double>(std::numeric_limits<int64_t>::max()));
    body.push_back(kir::let("best", kir::constant(init, acc)));
    body.push_back(kir::let("at", kir::constant(0, DType::I64)));
    ExprRef along = redIdx.empty() ? c(0) : kir::flatIndex(redShape, redIdx);
    ValuePtr better = acc == DType::F32 ? replacesBest(wantMax, kir::cast(x, acc), kir::local("best", acc))
                                        : kir::binary(wantMax ? OpKind::Gt : OpKind::Lt, kir::cast(x, acc), kir::local("best", acc), DType::Bool);
    std::vector<StmtPtr> update;
    update.push_back(kir::assign("best", kir::cast(x, acc)));
    update.push_back(kir::assign("at", kir::indexValue(along)));
    body.push_back(accumulate(kir::when(better, std::move(update)), {{"best", wantMax ? OpKind::Gt : OpKind::Lt, "at"}}));
    bool arg = kind == OpKind::Argmax || kind == OpKind::Argmin;
    body.push_back(kir::store(out(), outFlat, kir::cast(arg ? kir::local("at", DType::I64) : kir::local("best", acc), t)));
    break;
  }
  case OpKind::Logsumexp: {
    body.push_back(kir::let("best", kir::constant(-INFINITY, DType::F32)));
    body.push_back(accumulate(kir::assign("best", kir::binary(OpKind::Maximum, kir::local("best", DType::F32), x, DType::F32)),
                              {{"best", OpKind::Maximum, ""}}));
    blockedSum(in, inIdx, reduced, "acc", [&](const Dims &at) {
      return kir::unary(OpKind::Exp, kir::binary(OpKind::Sub, readIn(at), kir::local("best", DType::F32), DType::F32), DType::F32);
    }, body);
    // A row whose maximum is infinite is that infinity: all -inf (a fully masked row) is
    // -inf, as in SciPy, where best + log(sum) would be NaN (exp(-inf - -inf)).
    ValuePtr best = kir::local("best", DType::F32);
    ValuePtr infinite = kir::binary(OpKind::Eq, kir::unary(OpKind::Abs, best, DType::F32), kir::constant(INFINITY, DType::F32), DType::Bool);
    ValuePtr lse = kir::binary(OpKind::Add, best, kir::unary(OpKind::Log, kir::local("acc", DType::F32), DType::F32), DType::F32);
    body.push_back(kir::store(out(), outFlat, kir::cast(kir::select(infinite, best, lse), t)));
    break;
  }
  default: return nullptr;
  }
  return loopNest(keptShape, keptIdx, std::move(body));
}

// A reduction over a run of axes R followed by kept ones I, [K..., R..., I...] (a sum over
// the batch of [B, D], over B and T of [B, T, D]): reduction() would give each task one
// output element, and its loop over R would read one element per cache line. Instead a
// task streams the reduced rows through vector loops, accumulating in its output elements
// (a max or min, a sum of at most kSumBlock rows per axis) or in local arrays: sums stay
// blocked as blockedSum's, element by element, with the same error bound. Each task takes
// up to kColumnChunk consecutive elements of I's last axis; where the elements of I are a
// constant at most half kColumnLanes (sum(x, 0) of [M, 4]), a task (one per K index) takes whole
// groups of rows at a time instead, their elements contiguous, in the lanes of one local
// array, and folds the groups' lanes into each output element at the end of each block.
// Only where the output is f32 (the accumulator) and, for max and min, the input too; not
// on a target without the schedule (a GPU's lanes split R instead).
StmtPtr Lowering::columnReduction(const std::set<size_t> &reduced) {
  const Dims &in = this->in(0);
  OpKind kind = op_.kind;
  bool sum = kind == OpKind::Sum || kind == OpKind::Mean;
  if (!schedule_.columnReductions || reduced.empty() || dtype(out()) != DType::F32 ||
      !(sum ? isFloat(inType(0)) : (kind == OpKind::Max || kind == OpKind::Min) && inType(0) == DType::F32))
    return nullptr;
  size_t first = *reduced.begin(), last = *reduced.rbegin(), inner = in.size() - 1;
  if (last - first + 1 != reduced.size() || last == inner)
    return nullptr;
  int64_t rowElements = 1; // of I, when a constant (else 0)
  for (size_t a = last + 1; a < in.size(); ++a)
    rowElements = in[a]->asConst() ? rowElements * *in[a]->asConst() : 0;
  bool groups = outer_.kind != OpKind::Fused && rowElements > 0 && rowElements <= kColumnLanes / 2;
  double init = sum ? 0 : kind == OpKind::Max ? -INFINITY : INFINITY;
  // The earlier value `a` and a later `b` combined: for max and min as reduction()'s scan
  // does (equal values keep the earlier: -0 and +0 as the reference interpreter gives them).
  auto fold = [&](ValuePtr a, ValuePtr b) {
    return sum ? kir::binary(OpKind::Add, a, b, DType::F32) : kir::select(replacesBest(kind == OpKind::Max, b, a), b, a);
  };

  // Rows of elements: the output's, or a local array's; `each` stores f(element) into
  // elements [0, extent) of a row in a vector loop over j.
  struct Row {
    int buffer;
    ExprRef base;
  };
  ExprRef j = sym::var(kir::loopVar(next_++));
  auto element = [&](Row r, ExprRef at) { return kir::load(r.buffer, sym::add(r.base, at), DType::F32); };
  auto each = [&](Row r, ExprRef extent, const std::function<ValuePtr(ValuePtr)> &f) {
    return kir::loop(j->asVar()->name, extent, one(kir::store(r.buffer, sym::add(r.base, j), f(element(r, j)))),
                     Stmt::Schedule::Vectorize);
  };
  auto set = [&](Row r, ExprRef extent, double v) { return each(r, extent, [&](ValuePtr) { return kir::constant(v, DType::F32); }); };
  auto add = [&](Row target, Row from, ExprRef extent) {
    return each(target, extent, [&](ValuePtr acc) { return kir::binary(OpKind::Add, acc, element(from, j), DType::F32); });
  };
  auto newRow = [&](const std::string &name) {
    k_.buffers.push_back({name, DType::F32, {c(kColumnLanes)}, false, true});
    return Row{static_cast<int>(k_.buffers.size()) - 1, c(0)};
  };
  auto isBlocked = [&](ExprRef extent) { return sum && sumBlocked(extent); };

  ExprRef rows = c(1); // rows of I's elements per K index: the terms of each output element
  for (size_t a = first; a <= last; ++a)
    rows = sym::mul(rows, in[a]);
  auto divideByCount = [&](Row total, ExprRef extent) { // an empty mean is 0 / 0: NaN
    return each(total, extent, [&](ValuePtr acc) { return kir::binary(OpKind::Div, acc, kir::cast(kir::indexValue(rows), DType::F32), DType::F32); });
  };
  // The task of K index `keptIdx` as row groups of `width` (I's elements) each: G rows per
  // step, lane g*width + n of a local array holding column n of the rows g mod G.
  Dims kept(in.begin(), in.begin() + static_cast<long>(first));
  // (`divisor`: the width as it divides, clamped where the width is not a constant.)
  auto grouped = [&](const Dims &keptIdx, ExprRef width, ExprRef divisor) {
    std::vector<StmtPtr> body;
    ExprRef perStep = sym::floorDiv(c(kColumnLanes), divisor);
    ExprRef slab = sym::mul(kir::flatIndex(kept, keptIdx), sym::mul(rows, width));
    Row total{out(), sym::mul(kir::flatIndex(kept, keptIdx), width)}, lanes = newRow("lanes");
    bool blocked = isBlocked(rows);
    ExprRef block = blocked ? sym::var(kir::loopVar(next_++)) : c(0), step = sym::var(kir::loopVar(next_++));
    ExprRef blockRows = blocked ? sumBlockLength(rows, block) : rows;
    ExprRef row0 = sym::add(sym::mul(block, c(kSumBlock)), sym::mul(step, perStep));
    std::vector<StmtPtr> perBlock;
    perBlock.push_back(set(lanes, c(kColumnLanes), init));
    ExprRef stepLanes = sym::min(sym::mul(perStep, width), sym::mul(sym::sub(blockRows, sym::mul(step, perStep)), width));
    // The input as it lies (never a fused group's: a producer computed in the group would
    // need its per-axis index, and the row groups' lanes are flat positions).
    ValuePtr x = kir::cast(kir::load(0, sym::add(slab, sym::add(sym::mul(row0, width), j)), dtype(0)), DType::F32);
    perBlock.push_back(kir::loop(step->asVar()->name, sym::floorDiv(sym::add(blockRows, sym::sub(perStep, c(1))), perStep),
                                 one(each(lanes, stepLanes, [&](ValuePtr acc) { return fold(acc, x); }))));
    // Column n's value in this block: its G lanes folded in order, then into the total.
    ExprRef n = sym::var(kir::loopVar(next_++)), g = sym::var(kir::loopVar(next_++));
    std::vector<StmtPtr> column;
    column.push_back(kir::let("lane", kir::constant(init, DType::F32)));
    column.push_back(kir::loop(g->asVar()->name, perStep,
                               one(kir::assign("lane", fold(kir::local("lane", DType::F32), element(lanes, sym::add(sym::mul(g, width), n)))))));
    ValuePtr folded = sum ? kir::binary(OpKind::Add, element(total, n), kir::local("lane", DType::F32), DType::F32) : kir::local("lane", DType::F32);
    column.push_back(kir::store(total.buffer, sym::add(total.base, n), folded));
    perBlock.push_back(kir::loop(n->asVar()->name, width, std::move(column)));
    if (!sum) {
      // The lanes hold rows g, g + G, ..., so the first of equal values in group order need
      // not be the first in row order: where a column's result is a zero (+0 and -0 compare
      // equal) or a NaN (payloads), the reference's value is its first row equal to it (or
      // first NaN). Where any column's is, one pass over the rows from the last up, a
      // vector loop along each row, makes each such column's result its earliest equal
      // value (at most one more pass over the input; none for other results).
      auto isNaN = [](ValuePtr v) { return kir::binary(OpKind::Ne, v, v, DType::Bool); };
      auto unsettled = [&](ValuePtr t) {
        return kir::binary(OpKind::Or, kir::binary(OpKind::Eq, t, kir::constant(0, DType::F32), DType::Bool), isNaN(t), DType::Bool);
      };
      ExprRef m = sym::var(kir::loopVar(next_++)), r = sym::var(kir::loopVar(next_++));
      perBlock.push_back(kir::let("unsettled", kir::constant(0, DType::F32)));
      perBlock.push_back(kir::loop(m->asVar()->name, width,
                                   one(kir::when(unsettled(element(total, m)),
                                                 one(kir::assign("unsettled", kir::constant(1, DType::F32)))))));
      ValuePtr t = element(total, j);
      ValuePtr v = kir::cast(kir::load(0, sym::add(slab, sym::add(sym::mul(sym::sub(sym::sub(rows, c(1)), r), width), j)), dtype(0)),
                             DType::F32);
      ValuePtr same = kir::binary(OpKind::Or, kir::binary(OpKind::Eq, v, t, DType::Bool),
                                  kir::binary(OpKind::And, isNaN(v), isNaN(t), DType::Bool), DType::Bool);
      ValuePtr takes = kir::binary(OpKind::And, unsettled(t), same, DType::Bool);
      StmtPtr pass = kir::loop(r->asVar()->name, rows, one(each(total, width, [&](ValuePtr now) { return kir::select(takes, v, now); })));
      perBlock.push_back(kir::when(kir::binary(OpKind::Gt, kir::local("unsettled", DType::F32), kir::constant(0.5, DType::F32), DType::Bool),
                                   one(std::move(pass))));
    }
    if (sum)
      body.push_back(set(total, width, 0));
    if (blocked)
      body.push_back(kir::loop(block->asVar()->name, sumBlocks(rows), std::move(perBlock)));
    else
      std::move(perBlock.begin(), perBlock.end(), std::back_inserter(body));
    if (kind == OpKind::Mean)
      body.push_back(divideByCount(total, width));
    return body;
  };

  Dims parallel, extents;
  std::vector<StmtPtr> body;
  if (groups) {
    parallel = vars(first), extents = kept;
    body = grouped(parallel, c(rowElements), c(rowElements));
  } else {
    // Chunks of kColumnChunk elements of I's last axis, a task each.
    ExprRef chunk = sym::var(kir::loopVar(next_++)), column0 = sym::mul(chunk, c(kColumnChunk));
    ExprRef columns = sym::min(c(kColumnChunk), sym::sub(in[inner], column0));
    Dims inIdx(in.size()), keptShape, keptIdx;
    for (size_t a = 0; a < in.size(); ++a) {
      ExprRef v = sym::var(kir::loopVar(next_++));
      inIdx[a] = a == inner ? sym::add(column0, j) : v;
      if (reduced.count(a))
        continue;
      keptShape.push_back(in[a]);
      keptIdx.push_back(a == inner ? column0 : v);
      parallel.push_back(a == inner ? chunk : v);
      extents.push_back(a == inner ? sym::floorDiv(sym::add(in[a], c(kColumnChunk - 1)), c(kColumnChunk)) : in[a]);
    }
    Row total{out(), kir::flatIndex(keptShape, keptIdx)};
    auto term = [&] { return kir::cast(read(0, inIdx), DType::F32); }; // at inIdx as it is then
    // blockedSum's levels, each local a row: folds reduced axes a.. into `target`.
    std::function<StmtPtr(size_t, Row)> level = [&](size_t a, Row target) -> StmtPtr {
      bool blocked = isBlocked(in[a]);
      ExprRef block = blocked ? sym::var(kir::loopVar(next_++)) : nullptr, e = sym::var(kir::loopVar(next_++));
      ExprRef start = blocked ? sym::mul(block, c(kSumBlock)) : c(0), elements = blocked ? sumBlockLength(in[a], block) : in[a];
      Row into = blocked ? newRow(fmt::format("sum.p{}", a - first)) : target;
      StmtPtr elementLoop;
      if (a == last) {
        // Rows kRowsPerPass at a time, combined pairwise before they join the
        // accumulator: a quarter of its loads and stores, and of the loop overhead.
        // (Each row's element in a local: a max's fold reads its operands three times.)
        auto rowsAt = [&](ExprRef row0, int64_t count) {
          std::vector<StmtPtr> body;
          std::vector<ValuePtr> rows;
          for (int64_t u = 0; u < count; ++u) {
            inIdx[a] = sym::add(row0, c(u));
            std::string name = fmt::format("row{}", u);
            body.push_back(kir::let(name, term()));
            rows.push_back(kir::local(name, DType::F32));
          }
          for (size_t width = 1; width < rows.size(); width *= 2)
            for (size_t k = 0; k + width < rows.size(); k += 2 * width)
              body.push_back(kir::assign(rows[k]->local, fold(rows[k], rows[k + width])));
          body.push_back(kir::store(into.buffer, sym::add(into.base, j), fold(element(into, j), rows[0])));
          return kir::loop(j->asVar()->name, columns, std::move(body), Stmt::Schedule::Vectorize);
        };
        ExprRef passes = sym::floorDiv(elements, c(kRowsPerPass)), tail = sym::var(kir::loopVar(next_++));
        std::vector<StmtPtr> loops;
        loops.push_back(kir::loop(e->asVar()->name, passes, one(rowsAt(sym::add(start, sym::mul(e, c(kRowsPerPass))), kRowsPerPass))));
        loops.push_back(kir::loop(tail->asVar()->name, sym::mod(elements, c(kRowsPerPass)),
                                  one(rowsAt(sym::add(sym::add(start, sym::mul(passes, c(kRowsPerPass))), tail), 1))));
        elementLoop = kir::block(std::move(loops));
      } else {
        inIdx[a] = sym::add(start, e);
        std::vector<StmtPtr> iteration;
        if (!sum) {
          iteration.push_back(level(a + 1, into));
        } else {
          Row fresh = newRow(fmt::format("sum.q{}", a - first));
          iteration.push_back(set(fresh, columns, 0));
          iteration.push_back(level(a + 1, fresh));
          iteration.push_back(add(into, fresh, columns));
        }
        elementLoop = kir::loop(e->asVar()->name, elements, std::move(iteration));
      }
      if (!blocked)
        return elementLoop;
      std::vector<StmtPtr> perBlock;
      perBlock.push_back(set(into, columns, 0));
      perBlock.push_back(std::move(elementLoop));
      perBlock.push_back(add(target, into, columns));
      return kir::loop(block->asVar()->name, sumBlocks(in[a]), std::move(perBlock));
    };
    std::vector<StmtPtr> chunked;
    chunked.push_back(set(total, columns, init));
    chunked.push_back(level(first, total));
    if (kind == OpKind::Mean)
      chunked.push_back(divideByCount(total, columns));
    if (outer_.kind != OpKind::Fused && last + 1 == inner && rowElements == 0) {
      // I is one axis of a size known only at run time: rows of at most half the local
      // arrays' lanes take the row groups, longer ones the chunks. The group's step
      // divides by the width clamped into [1, kColumnLanes / 2], so that the
      // branch not taken (whose terms the runtime's work estimate sums) stays finite.
      auto atMost = [&](ExprRef a, ExprRef b) { return kir::binary(OpKind::Le, kir::indexValue(a), kir::indexValue(b), DType::Bool); };
      Dims keptK(inIdx.begin(), inIdx.begin() + static_cast<long>(first));
      ExprRef clamped = sym::min(sym::max(in[inner], c(1)), c(kColumnLanes / 2));
      body.push_back(kir::when(atMost(in[inner], c(kColumnLanes / 2)), grouped(keptK, in[inner], clamped)));
      body.push_back(kir::when(atMost(c(kColumnLanes / 2 + 1), in[inner]), std::move(chunked)));
    } else {
      body = std::move(chunked);
    }
  }
  StmtPtr s = kir::block(std::move(body));
  for (size_t k = parallel.size(); k-- > 0;)
    s = kir::loop(parallel[k]->asVar()->name, extents[k], one(std::move(s)), Stmt::Schedule::Parallel);
  return s;
}

StmtPtr Lowering::softmax() {
  const Dims &in = this->in(0);
  size_t a = axisAttr("axis");
  Dims rowShape, rowIdx, idx(in.size());
  for (size_t k = 0; k < in.size(); ++k) {
    ExprRef v = sym::var(kir::loopVar(next_++));
    idx[k] = v;
    if (k != a)
      rowShape.push_back(in[k]), rowIdx.push_back(v);
  }
  std::string j = idx[a]->asVar()->name;
  ExprRef flat = kir::flatIndex(in, idx);
  ValuePtr x = read(0, idx);
  ValuePtr best = kir::local("best", DType::F32), sum = kir::local("sum", DType::F32);
  ValuePtr shifted = kir::binary(OpKind::Sub, x, best, DType::F32);
  std::vector<StmtPtr> body;
  body.push_back(kir::let("best", kir::constant(-INFINITY, DType::F32)));
  body.push_back(kir::reduceLoop(j, in[a], one(kir::assign("best", kir::binary(OpKind::Maximum, best, x, DType::F32))),
                                 {{"best", OpKind::Maximum, ""}}));
  body.push_back(kir::let("sum", kir::constant(0, DType::F32)));
  // An f32 softmax keeps each exp(x - max) in its output element as it is summed, and
  // the last pass scales it there: one exp per element, not two (the same values: the
  // f32 store is exact, and every target splits the two loops over a row alike, so each
  // element is read back by whoever wrote it). Another output type would round the exp.
  bool keepExp = op_.kind == OpKind::Softmax && dtype(out()) == DType::F32;
  ValuePtr e = keepExp ? kir::local("e", DType::F32) : kir::unary(OpKind::Exp, shifted, DType::F32);
  std::vector<StmtPtr> term;
  if (keepExp) {
    body.push_back(kir::let("e", kir::constant(0, DType::F32)));
    term.push_back(kir::assign("e", kir::unary(OpKind::Exp, shifted, DType::F32)));
    term.push_back(kir::store(out(), flat, e));
  }
  term.push_back(kir::assign("sum", kir::binary(OpKind::Add, sum, e, DType::F32)));
  body.push_back(kir::reduceLoop(j, in[a], std::move(term), {{"sum", OpKind::Add, ""}}));
  // Each exp times 1/sum, as PyTorch's and ONNX Runtime's CPU kernels: a divide per
  // element was a quarter of a softmax's time (vdivps is ~8x an FMA's throughput); the
  // result is within an ulp of the quotient.
  ValuePtr reciprocal = kir::binary(OpKind::Div, kir::constant(1, DType::F32), sum, DType::F32);
  // log_softmax is x - logsumexp(x): where the row's max is +inf, so is logsumexp, and
  // x - max alone is the answer (NaN at the infinities, -inf elsewhere; log(sum) is NaN).
  ValuePtr infiniteMax = kir::binary(OpKind::Eq, best, kir::constant(INFINITY, DType::F32), DType::Bool);
  ValuePtr logSum = kir::select(infiniteMax, kir::constant(0, DType::F32), kir::unary(OpKind::Log, sum, DType::F32));
  ValuePtr v = op_.kind == OpKind::LogSoftmax
                   ? kir::binary(OpKind::Sub, shifted, logSum, DType::F32)
                   : kir::binary(OpKind::Mul, keepExp ? kir::load(out(), flat, DType::F32) : kir::unary(OpKind::Exp, shifted, DType::F32), reciprocal, DType::F32);
  body.push_back(kir::loop(j, in[a], one(kir::store(out(), flat, kir::cast(v, dtype(out())))), Stmt::Schedule::Vectorize));
  return loopNest(rowShape, rowIdx, std::move(body));
}

StmtPtr Lowering::convGemm(const ir::Op &op) {
  Conv2d conv{op.operands[0]->type.dims, op.operands[1]->type.dims, op.results[0]->type.dims, intAttrOf(op, "stride"),
              intAttrOf(op, "padding"), intAttrOf(op, "dilation"), intAttrOf(op, "groups"), out()};
  conv.input = bufferOf(op.operands[0]), conv.weights = bufferOf(op.operands[1]);
  StmtPtr body = conv2dGemm(conv, [&] { return sym::var(kir::loopVar(next_++)); },
                            [&](const Dims &idx) { return readValue(op_.results[0], idx); });
  if (!body) // ir::fuse joins a conv2d only where the target's schedule makes it a GEMM
    throw InternalError(fmt::format("{}: a fused conv2d that is not an implicit GEMM", k_.name));
  return body;
}

StmtPtr Lowering::matmul(const ir::Op &mm) {
  Dims a = mm.operands[0]->type.dims, b = mm.operands[1]->type.dims, o = mm.results[0]->type.dims;
  // B made by a fused transpose of its last two axes is read in place, column by column.
  const ir::Value *bSource = mm.operands[1];
  bool transposedB = outer_.kind == OpKind::Fused && bSource->def && bSource->def->kind == OpKind::Transpose &&
                     std::find(outer_.regions[0]->ops.begin(), outer_.regions[0]->ops.end(), bSource->def) !=
                         outer_.regions[0]->ops.end();
  if (transposedB)
    bSource = bSource->def->operands[0];
  int aBuf = bufferOf(mm.operands[0]), bBuf = bufferOf(bSource);
  // B made by a prepack kernel lies in the GEMM's panels (where the target packs weights).
  const ir::Value *bMade = outer_.kind == OpKind::Fused ? outer_.operands[bBuf] : bSource;
  if (bMade->def && rt::isParamView(*bMade->def)) // w[l] of a prepacked w: the panels of matrix l
    bMade = bMade->def->operands[0];
  bool panelsB = schedule_.packedWeights && bMade->def && bMade->def->kind == OpKind::Prepack;
  // A narrow prepacked B lies transposed (Lowering::transpose): read by columns, as a
  // fused transpose is.
  bool narrowPanels = panelsB && isNarrow(mm.operands[1]->type.dims.back());
  DType aType = mm.operands[0]->type.dtype, bType = mm.operands[1]->type.dtype;
  // In a fused group the matmul's result is the group's output, where the epilogue (the
  // group's elementwise ops) then rewrites each row block while it is still in cache.
  bool epilogue = &mm != &op_;
  bool vecA = a.size() == 1, vecB = b.size() == 1;
  if (vecA)
    a.insert(a.begin(), c(1));
  if (vecB)
    b.push_back(c(1));
  size_t batch = std::max(a.size(), b.size()) - 2;
  ExprRef m = a[a.size() - 2], n = b.back(), depth = a.back();
  // Index of a matrix operand's element (row, col) in batch `full` (size-1 batch dims broadcast).
  auto operandIndex = [&](const Dims &d, const Dims &full, ExprRef row, ExprRef col) {
    Dims idx;
    size_t lead = d.size() - 2;
    for (size_t k = 0; k < lead; ++k)
      idx.push_back(d[k]->asConst() == 1 ? c(0) : full[batch - lead + k]);
    idx.push_back(row);
    idx.push_back(col);
    return kir::flatIndex(d, idx);
  };
  auto outIndex = [&](const Dims &full, ExprRef i, ExprRef j) {
    Dims idx(full);
    if (!vecA)
      idx.push_back(i);
    if (!vecB)
      idx.push_back(j);
    return kir::flatIndex(o, idx);
  };
  if (aType == DType::F32 && bType == DType::F32 && mm.results[0]->type.dtype == DType::F32) {
    // One parallel task per (batch, block of rows, block of columns): each is a tiled GEMM
    // over its columns, whose bases are offset to its first column. With variants the
    // blocks are dims the runtime binds per launch (runtime/GemmSelect.h).
    bool variants = schedule_.gemmVariants, splitN = variants || schedule_.gemmColumnBlock;
    ExprRef rowBlock = variants ? sym::var(rt::kGemmRowsDim) : c(kGemmRowBlock);
    ExprRef colBlock = variants ? sym::var(rt::kGemmColsDim) : schedule_.gemmColumnBlock ? c(schedule_.gemmColumnBlock) : n;
    ExprRef rowBlocks = sym::floorDiv(sym::add(m, sym::sub(rowBlock, c(1))), rowBlock);
    ExprRef colBlocks = splitN ? sym::floorDiv(sym::add(n, sym::sub(colBlock, c(1))), colBlock) : c(1);
    ExprRef blocks = sym::mul(rowBlocks, colBlocks);
    ExprRef batches = c(1), p = sym::var(kir::loopVar(next_++));
    for (size_t k = 0; k < batch; ++k)
      batches = sym::mul(batches, o[k]);
    ExprRef tasks = sym::mul(blocks, batches);
    ExprRef batchFlat = sym::floorDiv(p, blocks), inBatch = sym::mod(p, blocks);
    ExprRef row0 = sym::mul(sym::floorDiv(inBatch, colBlocks), rowBlock);
    ExprRef col0 = splitN ? sym::mul(sym::mod(inBatch, colBlocks), colBlock) : c(0);
    Dims full(batch);
    ExprRef stride = c(1);
    for (size_t k = batch; k-- > 0;) {
      full[k] = sym::mod(sym::floorDiv(batchFlat, stride), o[k]);
      stride = sym::mul(stride, o[k]);
    }
    kir::Gemm g;
    g.a = aBuf, g.b = bBuf, g.c = out();
    g.aBase = operandIndex(a, full, c(0), c(0));
    bool byColumns = transposedB || narrowPanels; // B(k, j) at bBase + j * depth + k
    g.lda = depth, g.ldb = byColumns ? c(1) : n, g.ldc = vecB ? c(1) : n;
    if (byColumns)
      g.bColStride = depth;
    g.bBase = sym::add(operandIndex(transposedB ? bSource->type.dims : b, full, c(0), c(0)),
                       sym::mul(col0, byColumns ? depth : c(1)));
    g.bPanels = panelsB && !narrowPanels; // B is rank 2: bBase is the task's first column
    g.dotProducts = byColumns && isNarrow(n);

    g.cBase = sym::add(outIndex(full, c(0), c(0)), col0);
    g.row0 = row0, g.rows = sym::min(rowBlock, sym::sub(m, row0)), g.n = sym::min(colBlock, sym::sub(n, col0)), g.depth = depth;
    if (variants)
      g.packA = sym::var(rt::kGemmPackADim), g.shapeM = m, g.shapeN = n, g.batches = batches;
    if (epilogue) {
      Dims rc = vars(2), idx(full);
      idx.push_back(sym::add(row0, rc[0]));
      idx.push_back(sym::add(col0, rc[1]));
      StmtPtr rows = kir::loop(rc[1]->asVar()->name, g.n, one(kir::store(out(), kir::flatIndex(o, idx), readValue(op_.results[0], idx))),
                               Stmt::Schedule::Vectorize);
      g.epilogue = kir::loop(rc[0]->asVar()->name, g.rows, one(std::move(rows)));
    }
    return kir::loop(p->asVar()->name, tasks, one(kir::gemm(std::move(g))), Stmt::Schedule::Parallel);
  }
  if (epilogue || transposedB)
    throw InternalError("only f32 matmuls take fused epilogues or transposed operands");
  // Other dtypes: one dot product per output element, accumulated in f32 (f16, bf16) or
  // exactly in i64 with wrapping (integers and bools, as the oracle).
  Dims oIdx = vars(batch + 2); // batch..., i, j
  ExprRef kVar = sym::var(kir::loopVar(next_++));
  Dims full(oIdx.begin(), oIdx.begin() + static_cast<long>(batch));
  ExprRef i = oIdx[batch], j = oIdx[batch + 1];
  DType accType = isFloat(aType) ? DType::F32 : DType::I64;
  ValuePtr prod = kir::binary(OpKind::Mul, kir::cast(kir::load(aBuf, operandIndex(a, full, i, kVar), aType), accType),
                              kir::cast(kir::load(bBuf, operandIndex(b, full, kVar, j), bType), accType), accType);
  std::vector<StmtPtr> body;
  body.push_back(kir::let("acc", kir::constant(0, accType)));
  body.push_back(kir::loop(kVar->asVar()->name, depth,
                           one(kir::assign("acc", kir::binary(OpKind::Add, kir::local("acc", accType), prod, accType)))));
  body.push_back(kir::store(out(), outIndex(full, i, j), kir::cast(kir::local("acc", accType), dtype(out()))));
  Dims loopShape(o.begin(), o.begin() + static_cast<long>(batch));
  loopShape.push_back(m);
  loopShape.push_back(n);
  return loopNest(loopShape, oIdx, std::move(body));
}

// attention: one parallel task per (batch, the schedule's attentionRowBlocks blocks of
// kAttentionRowBlock query rows), each a kir::Attention over its rows; q, k, v and the
// result share their batch dims, and the mask's dims broadcast (a dim of 1 reads index 0,
// a stride of 0).
StmtPtr Lowering::attention() {
  const Dims &q = in(0), &k = in(1), &v = in(2);
  size_t r = q.size(), batch = r - 2;
  ExprRef tq = q[r - 2];
  const int64_t taskRows = kAttentionRowBlock * schedule_.attentionRowBlocks;
  ExprRef blocks = sym::floorDiv(sym::add(tq, c(taskRows - 1)), c(taskRows));
  ExprRef tasks = blocks, p = sym::var(kir::loopVar(next_++));
  for (size_t a = 0; a < batch; ++a)
    tasks = sym::mul(tasks, q[a]);
  ExprRef batchFlat = sym::floorDiv(p, blocks);
  Dims full(batch);
  ExprRef stride = c(1);
  for (size_t a = batch; a-- > 0;) {
    full[a] = sym::mod(sym::floorDiv(batchFlat, stride), q[a]);
    stride = sym::mul(stride, q[a]);
  }
  auto base = [&](const Dims &d) {
    Dims idx(full);
    idx.push_back(c(0));
    idx.push_back(c(0));
    return kir::flatIndex(d, idx);
  };
  kir::Attention att;
  att.q = 0, att.k = 1, att.v = 2, att.o = out();
  att.qBase = base(q), att.kBase = base(k), att.vBase = base(v), att.oBase = base(dims(out()));
  att.row0 = sym::mul(sym::mod(p, blocks), c(taskRows));
  att.rows = sym::min(c(taskRows), sym::sub(tq, att.row0));
  att.keys = k[r - 2], att.d = q[r - 1], att.dv = v[r - 1];
  att.scale = op_.has("scale") ? op_.get<double>("scale") : 1.0;
  att.causal = op_.has("causal") && op_.get<bool>("causal");
  if (att.causal)
    att.fill = op_.get<double>("fill");
  att.rowBlock = kAttentionRowBlock;
  if (op_.operands.size() > 3) {
    const Dims &m = in(3);
    size_t lead = r - m.size(); // the mask's axis a is the scores' axis lead + a
    att.mask = 3, att.maskBase = c(0), att.maskRow = c(0), att.maskCol = c(0);
    ExprRef s = c(1);
    for (size_t a = m.size(); a-- > 0;) {
      ExprRef st = m[a]->asConst() == 1 ? c(0) : s;
      size_t axis = lead + a;
      if (axis == r - 1)
        att.maskCol = st;
      else if (axis == r - 2)
        att.maskRow = st;
      else
        att.maskBase = sym::add(att.maskBase, sym::mul(full[axis], st));
      s = sym::mul(s, m[a]);
    }
  }
  return kir::loop(p->asVar()->name, tasks, one(kir::attention(std::move(att))), Stmt::Schedule::Parallel);
}

// conv2d (other dtypes) and the pools: an accumulation over a window, skipping padded positions.
StmtPtr Lowering::window(bool conv) {
  const Dims &x = dims(0), &o = dims(out());
  int64_t stride, pad = intAttr("padding"), dil = 1, groups = 1, kh = 0, kw = 0;
  ExprRef cg = c(1), khDim, kwDim; // a convolution's kernel size may be a dim (its weight's)
  if (conv) {
    stride = intAttr("stride"), dil = intAttr("dilation"), groups = intAttr("groups");
    const Dims &w = dims(1);
    cg = w[1], khDim = w[2], kwDim = w[3];
  } else {
    kh = kw = intAttr("kernel");
    khDim = kwDim = c(kh);
    stride = intAttr("stride") == 0 ? kh : intAttr("stride");
  }
  Dims idx = vars(4); // n, o (or c), oh, ow
  ExprRef ci = sym::var(kir::loopVar(next_++)), ki = sym::var(kir::loopVar(next_++)), kj = sym::var(kir::loopVar(next_++));
  ExprRef ih = sym::add(sym::sub(sym::mul(idx[2], c(stride)), c(pad)), sym::mul(ki, c(dil)));
  ExprRef iw = sym::add(sym::sub(sym::mul(idx[3], c(stride)), c(pad)), sym::mul(kj, c(dil)));
  auto inRange = [&](ExprRef v, ExprRef hi) {
    return kir::binary(OpKind::And, kir::binary(OpKind::Ge, kir::indexValue(v), kir::indexValue(c(0)), DType::Bool),
                       kir::binary(OpKind::Lt, kir::indexValue(v), kir::indexValue(hi), DType::Bool), DType::Bool);
  };
  ValuePtr inside = kir::binary(OpKind::And, inRange(ih, x[2]), inRange(iw, x[3]), DType::Bool);
  ExprRef channel = conv ? sym::add(sym::mul(sym::floorDiv(idx[1], sym::floorDiv(o[1], c(groups))), cg), ci) : idx[1];
  ValuePtr xv = kir::load(0, kir::flatIndex(x, {idx[0], channel, ih, iw}), dtype(0));
  OpKind combine = op_.kind == OpKind::MaxPool2d ? OpKind::Maximum : OpKind::Add;
  ValuePtr init = kir::constant(op_.kind == OpKind::MaxPool2d ? -INFINITY : 0, DType::F32);
  auto average = [&](ValuePtr sum) { // padding counts, as PyTorch's default does
    return op_.kind == OpKind::AvgPool2d ? kir::binary(OpKind::Div, sum, kir::constant(static_cast<double>(kh * kw), DType::F32), DType::F32)
                                         : sum;
  };
  if (!conv && pad == 0) {
    // A pool without padding: every window lies inside the image (windowOut's floor), so
    // its taps unroll into straight-line code with no bounds test, in the order the loop
    // below folds them, and the loop along the output row vectorizes.
    ValuePtr v = init;
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        ExprRef row = sym::add(sym::mul(idx[2], c(stride)), c(i)), col = sym::add(sym::mul(idx[3], c(stride)), c(j));
        v = kir::binary(combine, v, kir::load(0, kir::flatIndex(x, {idx[0], idx[1], row, col}), dtype(0)), DType::F32);
      }
    return loopNest(o, idx, one(kir::store(out(), kir::flatIndex(o, idx), kir::cast(average(v), dtype(out())))));
  }
  ValuePtr acc = kir::local("acc", DType::F32);
  ValuePtr term = conv ? kir::binary(OpKind::Mul, xv, kir::load(1, kir::flatIndex(dims(1), {idx[1], ci, ki, kj}), dtype(1)), DType::F32)
                       : xv;
  StmtPtr update = kir::when(inside, one(kir::assign("acc", kir::binary(combine, acc, term, DType::F32))));
  StmtPtr inner = kir::loop(kj->asVar()->name, kwDim, one(std::move(update)));
  inner = kir::loop(ki->asVar()->name, khDim, one(std::move(inner)));
  if (conv)
    inner = kir::loop(ci->asVar()->name, cg, one(std::move(inner)));
  std::vector<StmtPtr> body;
  body.push_back(kir::let("acc", init));
  body.push_back(std::move(inner));
  body.push_back(kir::store(out(), kir::flatIndex(o, idx), kir::cast(average(acc), dtype(out()))));
  return loopNest(o, idx, std::move(body));
}

StmtPtr Lowering::copyFlat() {
  ExprRef n = c(1);
  for (ExprRef d : dims(out()))
    n = sym::mul(n, d);
  Dims idx = vars(1);
  return loopNest({n}, idx, one(kir::store(out(), idx[0], kir::load(0, idx[0], dtype(0)))));
}

StmtPtr Lowering::transpose(bool panels) {
  const Dims &in = this->in(0), &o = dims(out());
  std::vector<size_t> perm(in.size());
  std::iota(perm.begin(), perm.end(), 0);
  if (op_.has("perm")) {
    auto p = listAttr("perm");
    for (size_t k = 0; k < p.size(); ++k)
      perm[k] = static_cast<size_t>(p[k]);
  } else {
    std::swap(perm[in.size() - 1], perm[in.size() - 2]);
  }
  Dims idx = vars(o.size()), inIdx(in.size());
  for (size_t k = 0; k < perm.size(); ++k)
    inIdx[perm[k]] = idx[k];
  ExprRef at = kir::flatIndex(o, idx);
  if (panels) { // (k, j) at panel j / P, row k, lane j % P; a last panel of N % P columns has rows that wide;
                 // each matrix of leading index l (w[l]) packed in place, at l K N
    size_t r = o.size();
    ExprRef k = idx[r - 2], j = idx[r - 1], depth = o[r - 2], n = o[r - 1];
    ExprRef p = c(kir::kPanelColumns), panel = sym::floorDiv(j, p);
    ExprRef width = sym::min(p, sym::sub(n, sym::mul(panel, p)));
    Dims lead(idx.begin(), idx.end() - 2), leadDims(o.begin(), o.end() - 2);
    ExprRef matrix = sym::mul(kir::flatIndex(leadDims, lead), sym::mul(depth, n));
    if (isNarrow(n)) // transposed: column j's K values from j K on
      at = sym::add(matrix, sym::add(sym::mul(j, depth), k));
    else
      at = sym::add(matrix, sym::add(sym::mul(panel, sym::mul(depth, p)), sym::add(sym::mul(k, width), sym::mod(j, p))));
  }
  return loopNest(o, idx, one(kir::store(out(), at, read(0, inIdx))));
}

// concat / stack / split: one loop nest per operand (per result). Where the target
// shares loops (ScheduleOptions::sharedConcatLoops), the loops over the dims before the
// axis are one nest (the threads split its range) with each part's nest over the rest
// inside it; else the parts' whole nests run one after another.
struct Lowering::PartNests {
  Lowering &l;
  Dims shape; // the dims before the axis
  Dims outer; // their loop variables, where shared
  std::vector<StmtPtr> parts;

  PartNests(Lowering &lowering, Dims leading) : l(lowering), shape(std::move(leading)) {
    if (l.schedule_.sharedConcatLoops)
      outer = l.vars(shape.size());
  }
  // The loop variables of a part of dims `dims` (the leading ones shared or fresh).
  Dims indexFor(const Dims &dims) {
    Dims idx = outer.empty() ? l.vars(shape.size()) : outer, rest = l.vars(dims.size() - shape.size());
    idx.insert(idx.end(), rest.begin(), rest.end());
    return idx;
  }
  // The part's nest: over the dims after the shared ones, or all of them.
  void add(const Dims &dims, const Dims &idx, StmtPtr store) {
    auto lead = static_cast<long>(outer.size());
    parts.push_back(loopNest(Dims(dims.begin() + lead, dims.end()), Dims(idx.begin() + lead, idx.end()), one(std::move(store))));
  }
  StmtPtr nest() { return outer.empty() ? kir::block(std::move(parts)) : loopNest(shape, outer, std::move(parts)); }
};

StmtPtr Lowering::concat(bool stack) {
  const Dims &o = dims(out());
  size_t a = axisAttr("axis");
  PartNests nests(*this, Dims(o.begin(), o.begin() + static_cast<long>(a)));
  ExprRef offset = c(0);
  for (size_t b = 0; b < op_.operands.size(); ++b) {
    const Dims &in = dims(static_cast<int>(b));
    Dims idx = nests.indexFor(in), outIdx = idx;
    if (stack)
      outIdx.insert(outIdx.begin() + static_cast<long>(a), c(static_cast<int64_t>(b)));
    else
      outIdx[a] = sym::add(idx[a], offset);
    nests.add(in, idx, kir::store(out(), kir::flatIndex(o, outIdx), loadAt(static_cast<int>(b), idx)));
    if (!stack)
      offset = sym::add(offset, in[a]);
  }
  return nests.nest();
}

StmtPtr Lowering::split() {
  size_t a = axisAttr("axis");
  const Dims &in = dims(0);
  PartNests nests(*this, Dims(in.begin(), in.begin() + static_cast<long>(a)));
  ExprRef offset = c(0);
  for (size_t r = 0; r < op_.results.size(); ++r) {
    const Dims &o = dims(out(static_cast<int>(r)));
    Dims idx = nests.indexFor(o), inIdx = idx;
    inIdx[a] = sym::add(idx[a], offset);
    nests.add(o, idx, kir::store(out(static_cast<int>(r)), kir::flatIndex(o, idx), loadAt(0, inIdx)));
    offset = sym::add(offset, o[a]);
  }
  return nests.nest();
}

StmtPtr Lowering::pad() {
  const Dims &in = dims(0), &o = dims(out());
  const ir::DimList &pads = op_.get<ir::DimList>("pads"); // widths may be dim expressions
  Dims idx = vars(o.size()), inIdx;
  ValuePtr inside = kir::constant(1, DType::Bool);
  for (size_t k = 0; k < o.size(); ++k) {
    ExprRef i = k < pads.size() / 2 ? sym::sub(idx[k], pads[2 * k]) : idx[k];
    inIdx.push_back(i);
    if (k < pads.size() / 2)
      inside = kir::binary(OpKind::And, inside,
                           kir::binary(OpKind::And, kir::binary(OpKind::Ge, kir::indexValue(i), kir::indexValue(c(0)), DType::Bool),
                                       kir::binary(OpKind::Lt, kir::indexValue(i), kir::indexValue(in[k]), DType::Bool), DType::Bool),
                           DType::Bool);
  }
  ExprRef flat = kir::flatIndex(o, idx);
  std::vector<StmtPtr> body;
  body.push_back(kir::store(out(), flat, kir::constant(op_.has("value") ? op_.get<double>("value") : 0.0, dtype(out()))));
  body.push_back(kir::when(inside, one(kir::store(out(), flat, loadAt(0, inIdx)))));
  return loopNest(o, idx, std::move(body));
}

// take / embedding: the runtime has checked every index is in range.
StmtPtr Lowering::take(size_t a) {
  const Dims &x = dims(0), &ids = dims(1), &o = dims(out());
  Dims idx = vars(o.size());
  Dims idIdx(idx.begin() + static_cast<long>(a), idx.begin() + static_cast<long>(a + ids.size()));
  Dims xIdx(idx.begin(), idx.begin() + static_cast<long>(a));
  xIdx.push_back(c(0));
  xIdx.insert(xIdx.end(), idx.begin() + static_cast<long>(a + ids.size()), idx.end());
  ExprRef stride = c(1);
  for (size_t k = a + 1; k < x.size(); ++k)
    stride = sym::mul(stride, x[k]);
  ValuePtr id = kir::cast(kir::load(1, kir::flatIndex(ids, idIdx), dtype(1)), DType::I64);
  // Negative indices count from the end.
  ValuePtr wrapped = kir::select(kir::binary(OpKind::Lt, id, kir::indexValue(c(0)), DType::Bool),
                                 kir::binary(OpKind::Add, id, kir::indexValue(x[a]), DType::I64), id);
  ValuePtr offset = kir::binary(OpKind::Mul, wrapped, kir::indexValue(stride), DType::I64);
  return loopNest(o, idx, one(kir::store(out(), kir::flatIndex(o, idx), kir::load(0, kir::flatIndex(x, xIdx), dtype(0), offset))));
}

// An index whose slice bounds are dim expressions; a point index may be a run-time value
// (x[l] in a loop), read from its operand (the runtime has checked every point index).
StmtPtr Lowering::index() {
  const Dims &in = dims(0), &o = dims(out());
  ir::IndexAttrs ix = ir::IndexAttrs::of(op_);
  const ir::DimList &starts = ix.starts, &stops = ix.stops;
  Dims idx = vars(o.size()), inIdx;
  size_t next = 0;
  int operand = 1;
  ValuePtr offset;
  for (size_t a = 0; a < in.size(); ++a) {
    bool point = ix.isPoint(a);
    if (!point && (!starts[a] || !stops[a]))
      return nullptr; // a slice with run-time bounds has a run-time length: a host op
    if (point && !starts[a]) {
      ExprRef stride = c(1);
      for (size_t k = a + 1; k < in.size(); ++k)
        stride = sym::mul(stride, in[k]);
      ValuePtr p = kir::cast(kir::load(operand, c(0), dtype(operand)), DType::I64);
      ++operand;
      ValuePtr wrapped = kir::select(kir::binary(OpKind::Lt, p, kir::indexValue(c(0)), DType::Bool),
                                     kir::binary(OpKind::Add, p, kir::indexValue(in[a]), DType::I64), p);
      ValuePtr term = kir::binary(OpKind::Mul, wrapped, kir::indexValue(stride), DType::I64);
      offset = offset ? kir::binary(OpKind::Add, offset, term, DType::I64) : term;
      inIdx.push_back(c(0));
      continue;
    }
    ExprRef begin = point ? starts[a] : sym::max(c(0), sym::min(starts[a], in[a]));
    inIdx.push_back(point ? begin : sym::add(begin, sym::mul(idx[next++], c(ix.step(a)))));
  }
  return loopNest(o, idx, one(kir::store(out(), kir::flatIndex(o, idx), kir::load(0, kir::flatIndex(in, inIdx), dtype(0), offset))));
}

std::optional<kir::Kernel> Lowering::run() {
  if (op_.shapeClass == ir::ShapeClass::ISVDOS || op_.shapeClass == ir::ShapeClass::EDO)
    return std::nullopt;
  const ir::OpInfo &info = ir::opInfo(op_.kind);
  StmtPtr body;
  if (outer_.kind == OpKind::Fused) // a GEMM with an elementwise epilogue
    for (const ir::Op *member : outer_.regions[0]->ops)
      if (member->kind == OpKind::Matmul || member->kind == OpKind::Conv2d) {
        k_.body = member->kind == OpKind::Matmul ? matmul(*member) : convGemm(*member);
        return std::move(k_);
      }
  if (outer_.kind == OpKind::Fused && !ir::isReduction(op_.kind) && !ir::isElementwise(op_.kind)) {
    // An injective root (transpose, reshape, ...) computes each output element through
    // its own index map, like any member.
    const Dims &o = dims(out());
    Dims idx = vars(o.size());
    k_.body = loopNest(o, idx, one(kir::store(out(), kir::flatIndex(o, idx), readValue(op_.results[0], idx))));
    return std::move(k_);
  }
  if (info.placement != ir::Placement::Kernel)
    return std::nullopt;
  switch (op_.kind) {
  case OpKind::Zeros:
  case OpKind::Ones:
  case OpKind::Full: {
    const Dims &o = dims(out());
    Dims idx = vars(o.size());
    double v = op_.kind == OpKind::Zeros ? 0 : op_.kind == OpKind::Ones ? 1 : op_.get<double>("value");
    body = loopNest(o, idx, one(kir::store(out(), kir::flatIndex(o, idx), kir::constant(v, dtype(out())))));
    break;
  }
  case OpKind::Arange: {
    Dims idx = vars(1);
    ExprRef v = sym::add(op_.get<ExprRef>("start"), sym::mul(idx[0], op_.get<ExprRef>("step")));
    body = loopNest(dims(out()), idx, one(kir::store(out(), idx[0], kir::cast(kir::indexValue(v), dtype(out())))));
    break;
  }
  case OpKind::Softmax:
  case OpKind::LogSoftmax: body = softmax(); break;
  case OpKind::Matmul: body = matmul(op_); break;
  case OpKind::Attention: body = attention(); break;
  case OpKind::Conv2d:
    // The vectorized and GEMM schedules unroll the kernel's taps: its size must be known.
    if (schedule_.vectorizedConv2d && dtype(0) == DType::F32 && dtype(out()) == DType::F32 && dims(1)[2]->isConst() &&
        dims(1)[3]->isConst()) {
      Conv2d conv{dims(0), dims(1), dims(out()), intAttr("stride"), intAttr("padding"), intAttr("dilation"), intAttr("groups"), out()};
      auto fresh = [&] { return sym::var(kir::loopVar(next_++)); };
      if (schedule_.implicitGemmConv2d)
        body = conv2dGemm(conv, fresh);
      if (!body)
        body = vectorizedConv2d(conv, fresh);
    } else {
      body = window(true);
    }
    break;
  case OpKind::MaxPool2d:
  case OpKind::AvgPool2d: body = window(false); break;
  case OpKind::Reshape: case OpKind::Unsqueeze: case OpKind::Squeeze: case OpKind::Flatten: body = copyFlat(); break;
  case OpKind::Transpose: body = transpose(); break;
  case OpKind::Prepack: body = transpose(schedule_.packedWeights); break;
  case OpKind::BroadcastTo: {
    const Dims &o = dims(out());
    Dims idx = vars(o.size());
    body = loopNest(o, idx, one(kir::store(out(), kir::flatIndex(o, idx), read(0, broadcastIdx(in(0), idx)))));
    break;
  }
  case OpKind::Concat:
  case OpKind::Stack:
  case OpKind::Split: // one loop nest per operand (per result): each reads inputs only
    body = op_.kind == OpKind::Split ? split() : concat(op_.kind == OpKind::Stack);
    k_.independentLoops = true;
    break;
  case OpKind::Pad: body = pad(); break;
  case OpKind::Take: body = take(axisAttr("axis")); break;
  case OpKind::Embedding: body = take(0); break;
  case OpKind::OneHot: {
    const Dims &o = dims(out());
    Dims idx = vars(o.size());
    Dims idIdx(idx.begin(), idx.end() - 1);
    ValuePtr hit = kir::binary(OpKind::Eq, kir::cast(kir::load(0, kir::flatIndex(dims(0), idIdx), dtype(0)), DType::I64),
                               kir::indexValue(idx.back()), DType::Bool);
    body = loopNest(o, idx, one(kir::store(out(), kir::flatIndex(o, idx), kir::cast(hit, dtype(out())))));
    break;
  }
  case OpKind::Index: body = index(); break;
  default:
    if (!ir::isElementwise(op_.kind) && !ir::isReduction(op_.kind))
      throw InternalError(fmt::format("op '{}' runs in a kernel but has no lowering", info.spelling));
    body = ir::isElementwise(op_.kind) ? elementwise() : reduction();
  }
  if (!body)
    return std::nullopt;
  k_.body = std::move(body);
  return std::move(k_);
}

} // namespace

std::optional<kir::Kernel> lowerOp(const ir::Op &op, const std::string &name, const ScheduleOptions &schedule) {
  return Lowering(op, name, schedule).run();
}

LoweredGraph lowerGraph(const ir::Graph &g, const ScheduleOptions &schedule) {
  LoweredGraph out;
  for (const ir::Op *op : ir::opsPostOrder(g)) {
    if (rt::isParamView(*op)) // the runtime passes these on as views: no kernel, no buffer
      continue;
    std::string name = fmt::format("k{}_{}", out.kernels.size(), ir::opInfo(op->kind).spelling);
    if (auto k = lowerOp(*op, name, schedule)) {
      out.ops.push_back(op);
      out.kernels.push_back(std::move(*k));
    }
  }
  return out;
}

std::vector<const kir::Kernel *> LoweredGraph::kernelPointers() const {
  std::vector<const kir::Kernel *> out;
  for (const kir::Kernel &k : kernels)
    out.push_back(&k);
  return out;
}

std::vector<rt::KernelInfo> LoweredGraph::kernelInfos() const {
  std::vector<rt::KernelInfo> out;
  for (const kir::Kernel &k : kernels)
    out.push_back(kernelInfo(k));
  return out;
}

std::map<const ir::Op *, size_t> LoweredGraph::kernelOf() const {
  std::map<const ir::Op *, size_t> out;
  for (size_t k = 0; k < ops.size(); ++k)
    out[ops[k]] = k;
  return out;
}

namespace {
// The trip count of everything inside `s`, roughly: loops multiply, sequences add.
ExprRef workOf(const Stmt &s) {
  switch (s.kind) {
  case Stmt::Kind::Gemm: {
    ExprRef w = sym::mul(sym::mul(s.gemm.rows, s.gemm.n), s.gemm.depth);
    return s.gemm.epilogue ? sym::add(w, workOf(*s.gemm.epilogue)) : w;
  }
  case Stmt::Kind::Attention: { // a dot product over d and an update over dv per (row, key)
    const kir::Attention &a = s.attention;
    return sym::mul(sym::mul(a.rows, a.keys), sym::add(a.d, a.dv));
  }
  case Stmt::Kind::For:
  case Stmt::Kind::Block:
  case Stmt::Kind::If: {
    ExprRef sum = c(0);
    for (const StmtPtr &b : s.body)
      sum = sym::add(sum, workOf(*b));
    return s.kind == Stmt::Kind::For ? sym::mul(s.extent, sum) : sum;
  }
  default: return c(1);
  }
}
} // namespace

rt::KernelInfo kernelInfo(const kir::Kernel &k) {
  rt::KernelInfo info;
  info.name = k.name;
  info.dims = k.dims();
  if (std::vector<const Stmt *> nest = k.parallelNest(); !nest.empty()) {
    // The runtime splits the collapsed range of the whole nest.
    ExprRef extent = c(1), w = c(0);
    for (const Stmt *loop : nest)
      extent = sym::mul(extent, loop->extent);
    for (const StmtPtr &b : nest.back()->body)
      w = sym::add(w, workOf(*b));
    info.parallelExtent = extent;
    // Estimated at the first iteration of every loop it names (a GEMM's row block is full
    // there, as is a blocked sum's first block): the runtime can evaluate it from dims.
    std::map<std::string, ExprRef> first;
    for (const std::string &v : sym::freeVars(w))
      if (v.front() == '%') // kir::loopVar's names; dims are identifiers
        first[v] = c(0);
    info.work = sym::substitute(w, first);
    // A GEMM with variants (the nest's one statement): its shape, for the runtime's pick.
    if (nest.back()->body.size() == 1 && nest.back()->body[0]->kind == Stmt::Kind::Gemm && nest.back()->body[0]->gemm.shapeM) {
      const kir::Gemm &g = nest.back()->body[0]->gemm;
      info.gemmBatches = g.batches, info.gemmM = g.shapeM, info.gemmN = g.shapeN, info.gemmK = g.depth;
      info.gemmB = g.bPanels ? rt::GemmB::Panels : g.bColStride || g.im2col ? rt::GemmB::Gathered : rt::GemmB::Rows;
    }
  }
  gpu::Grid grid = gpu::gridOf(k);
  info.gridX = grid.x, info.gridY = grid.y, info.blockThreads = grid.threads;
  return info;
}

} // namespace dnnc::lower
