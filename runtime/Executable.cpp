// The runtime's executor: its walk of the graph, launches and arenas (see Executable.h).
#include "runtime/Executable.h"

#include "base/Error.h"
#include "base/Limits.h"
#include "base/Size.h"
#include "ir/graph/OpRegistry.h"
#include "ir/graph/Updates.h"
#include "ir/graph/Walk.h"
#include "runtime/GemmSelect.h"
#include "runtime/HostOps.h"
#include "runtime/ThreadPool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <unordered_map>

namespace dnnc::rt {

namespace {
// A host op whose first step's result serves every step (given dims bound outside the loop).
bool sameEveryStep(const ir::Op &op) { return op.kind == ir::OpKind::Constant || op.kind == ir::OpKind::DimValue; }

// What in a for loop's body keeps it from running compiled (Executable.h, loop paths),
// as far as the body alone tells: empty when nothing does.
std::string bodyRefusal(const ir::Op &loop, const std::map<const ir::Op *, size_t> &kernelOf) {
  const ir::Region &body = *loop.regions.back();
  const ir::Value *counter = body.args.empty() ? nullptr : body.args[0];
  // What varies from step to step: the carried values and what the body makes. An index
  // read from anything else (the counter, a value from outside the loop) is checked at
  // the first and last steps.
  std::set<const ir::Value *> varying(body.args.begin() + (counter ? 1 : 0), body.args.end());
  for (const ir::Op *op : body.ops)
    varying.insert(op->results.begin(), op->results.end());
  for (const ir::Op *op : body.ops) {
    std::string what = ir::opWhere(*op);
    if (op->kind == ir::OpKind::For || op->kind == ir::OpKind::While || op->kind == ir::OpKind::If)
      return "nested control flow: " + what;
    // A constant the host made in the first step is the same every step, and so is a dim's
    // value over dims the call bound (a training step's backward loop reads its forward
    // loop's lower bound); an assert over the inputs' dims that held then holds (refusal()
    // checks which dims they name).
    if (sameEveryStep(*op) || op->kind == ir::OpKind::AssertDims)
      continue;
    if (!isParamView(*op) && !kernelOf.count(op))
      return "a host op: " + what;
    if (ir::readsIndices(*op))
      for (size_t k = 1; k < op->operands.size(); ++k)
        if (varying.count(op->operands[k]))
          return "indices read from data: " + what;
  }
  // Copying one carried buffer into another would overwrite what a later copy reads.
  for (size_t k = 0; k < body.yields.size(); ++k)
    for (size_t a = 1; a < body.args.size(); ++a)
      if (body.yields[k] == body.args[a] && a != k + 1)
        return fmt::format("carried value {} yields carried value {}", k, a - 1);
  return {};
}
// The host index_adds in a loop's body that may update a carried value in place
// (Executable::updatesCarried_): the first operand a carried arg nothing else reads, the
// result read only as that arg's slot's yield.
void addCarriedUpdates(const ir::Op &loop, const std::map<const ir::Op *, size_t> &kernelOf, std::unordered_set<const ir::Op *> &into) {
  const ir::Region &body = *loop.regions.back();
  size_t first = loop.kind == ir::OpKind::For ? 1 : 0; // a for's counter comes first
  std::unordered_map<const ir::Value *, int> uses = ir::countUses(body);
  for (const ir::Op *op : body.ops) {
    if (op->kind != ir::OpKind::IndexAdd || kernelOf.count(op))
      continue;
    auto arg = std::find(body.args.begin() + static_cast<long>(first), body.args.end(), op->operands[0]);
    if (arg != body.args.end() && uses[*arg] == 1 && uses[op->results[0]] == 1 &&
        body.yields[static_cast<size_t>(arg - body.args.begin()) - first] == op->results[0])
      into.insert(op);
  }
}
} // namespace

Executable::Executable(const ir::Graph &graph, std::map<const ir::Op *, size_t> kernelOf, std::vector<KernelInfo> kernels,
                       std::unique_ptr<Device> device, std::shared_ptr<const ir::Graph> owned)
    : owned_(std::move(owned)), graph_(&graph), kernelOf_(std::move(kernelOf)), kernels_(std::move(kernels)),
      device_(std::move(device)) {
  ir::walk(graph.body, [&](const ir::Op &op) {
    opIndex_.emplace(&op, ops_.size());
    auto k = kernelOf_.find(&op);
    ops_.push_back(OpEntry{&op, k == kernelOf_.end() ? -1 : static_cast<int64_t>(k->second), isParamView(op),
                           ir::readsIndices(op)});
    if (op.kind == ir::OpKind::For)
      loopRefusal_.emplace(&op, bodyRefusal(op, kernelOf_));
    if (op.kind == ir::OpKind::For || op.kind == ir::OpKind::While)
      addCarriedUpdates(op, kernelOf_, updatesCarried_);
  });
  yields_.insert(graph.body.yields.begin(), graph.body.yields.end());
  // Checked again, not trusted: a graph that the execution-order pass did not order (an
  // artifact, a --passes list without it) keeps only the updates its order makes safe.
  updates_ = ir::safeUpdates(graph);
}

namespace {
// `e` under the binding a launch of `what` sees: every dim it names is bound by then, so
// no value means the user's sizes overflow 64 bits (a launch grid, an offset).
int64_t evaluateAtLaunch(const std::string &what, sym::ExprRef e, const ir::Binding &b) {
  auto v = sym::evaluate(e, b);
  if (v)
    return *v;
  for (const std::string &name : sym::freeVars(e))
    if (!b.count(name))
      throw InternalError(fmt::format("{}: dim {} is unbound at launch", what, e->str()));
  throw DataError(fmt::format("{}: {} overflows 64 bits at these dims", what, e->str()));
}

// The bytes of an arena under `b`, which may be more than memory holds.
size_t arenaSize(sym::ExprRef bytes, const ir::Binding &b) {
  int64_t n = evaluateAtLaunch("the memory plan", bytes, b);
  if (n < 0)
    throw InternalError(fmt::format("the arena size {} is {} at these dims", bytes->str(), n));
  return static_cast<size_t>(n);
}

void growArena(std::vector<uint8_t> &arena, size_t bytes) {
  if (arena.size() >= bytes)
    return;
  requireMemory(static_cast<int64_t>(bytes), "the planned intermediates");
  try {
    arena.resize(bytes);
  } catch (const std::bad_alloc &) {
    throw DataError(fmt::format("out of memory: {} bytes for the planned intermediates could not be allocated", bytes));
  }
}

std::vector<int64_t> shapeOf(const ir::TensorType &t, const std::function<int64_t(sym::ExprRef)> &eval) {
  std::vector<int64_t> shape;
  for (sym::ExprRef d : t.dims)
    shape.push_back(eval(d));
  return shape;
}

// Whether every dim `e` names is bound in `b`.
bool namesOnly(sym::ExprRef e, const ir::Binding &b) {
  for (const std::string &n : sym::freeVars(e))
    if (!b.count(n))
      return false;
  return true;
}

// Whether everything an op's checks and launch evaluate (the dims of its values and of a
// fused group's members, static index points) names only dims bound in `b`.
bool dimsBound(const ir::Op &op, const ir::Binding &b) {
  bool bound = true;
  auto type = [&](const ir::Value *v) {
    for (sym::ExprRef d : v->type.dims)
      bound = bound && namesOnly(d, b);
  };
  auto visit = [&](const ir::Op &o) {
    for (const ir::Value *v : o.operands)
      type(v);
    for (const ir::Value *v : o.results)
      type(v);
    if (o.kind == ir::OpKind::Index)
      for (sym::ExprRef start : ir::IndexAttrs::of(o).starts)
        bound = bound && (!start || namesOnly(start, b));
  };
  visit(op);
  if (op.kind == ir::OpKind::Fused)
    ir::walk(*op.regions[0], visit);
  return bound;
}

// Data-dependent indices must lie inside their buffers: kernels trust them.
void checkIndices(const ir::Op &op, const std::vector<const Tensor *> &in, const std::function<int64_t(sym::ExprRef)> &eval) {
  if (op.kind == ir::OpKind::Take || op.kind == ir::OpKind::Embedding) {
    size_t axis = 0;
    if (op.kind == ir::OpKind::Take) {
      axis = static_cast<size_t>(eval(op.get<sym::ExprRef>("axis"))); // non-negative after sema
    }
    int64_t d = in[0]->shape[axis];
    for (size_t k = 0; k < in[1]->numel(); ++k) {
      int64_t j = in[1]->getInt(k);
      if (j < -d || j >= d)
        throw DataError(fmt::format("index {} is out of range for dim {} of {} (size {})", j, axis, in[0]->typeText(), d));
    }
  }
  if (op.kind == ir::OpKind::Index) {
    ir::IndexAttrs ix = ir::IndexAttrs::of(op);
    size_t operand = 1;
    for (size_t a = 0; a < ix.starts.size(); ++a)
      if (ix.isPoint(a))
        ix.resolvePoint(a, op.operands[0]->type.dims[a], ix.starts[a] ? eval(ix.starts[a]) : in[operand++]->getInt(0),
                        in[0]->shape[a], in[0]->typeText());
  }
  // A fused kernel's index ops have static points only (fusion leaves runtime indices
  // alone), but `x[-3]` is `d - 3`, which a small binding makes negative.
  if (op.kind == ir::OpKind::Fused)
    ir::walk(*op.regions[0], [&](const ir::Op &member) {
      if (member.kind != ir::OpKind::Index)
        return;
      ir::IndexAttrs ix = ir::IndexAttrs::of(member);
      const ir::TensorType &x = member.operands[0]->type;
      for (size_t a = 0; a < ix.starts.size(); ++a)
        if (ix.isPoint(a)) {
          std::vector<int64_t> shape = shapeOf(x, eval);
          ix.resolvePoint(a, x.dims[a], eval(ix.starts[a]), shape[a], shapeText(x.dtype, shape));
        }
    });
}
} // namespace

Launch launchFor(const KernelInfo &info, const ir::Binding &bound) {
  Launch l;
  // A GEMM with variants: the one picked for this shape binds its dims, which the
  // kernel's tasks and the extent below read.
  std::optional<ir::Binding> withVariant;
  if (info.gemmM) {
    auto shape = [&](sym::ExprRef e) { return evaluateAtLaunch(info.name, e, bound); };
    l.gemmVariant = static_cast<int>(gemmVariantFor(info.gemmB, shape(info.gemmBatches), shape(info.gemmM), shape(info.gemmN),
                                                    shape(info.gemmK), ThreadPool::global().threads()));
    withVariant = bound;
    bindGemmVariant(static_cast<size_t>(l.gemmVariant), *withVariant);
  }
  const ir::Binding &b = withVariant ? *withVariant : bound;
  auto eval = [&](sym::ExprRef e) { return evaluateAtLaunch(info.name, e, b); };
  for (const std::string &n : info.dims)
    l.dims.push_back(eval(sym::var(n)));
  if (info.parallelExtent)
    l.extent = eval(info.parallelExtent);
  if (info.work) // an estimate: inner extents that vary per iteration leave it at 1
    l.work = sym::evaluate(info.work, b).value_or(1);
  if (info.gridX)
    l.gridX = std::max<int64_t>(1, eval(info.gridX));
  if (info.gridY)
    l.gridY = std::max<int64_t>(1, eval(info.gridY));
  return l;
}

bool isParamView(const ir::Op &op) {
  if (!ir::opInfo(op.kind).has(ir::OpFlag::ParamView) || !op.operands[0]->def)
    return false;
  // A param's prepacked copy is a constant of the run too (kept in the arena between calls).
  ir::OpKind source = op.operands[0]->def->kind;
  return (source == ir::OpKind::Param || source == ir::OpKind::Prepack) &&
         ir::IndexAttrs::of(op).isLeadingSlice(op.operands[0]->type.dims);
}

std::vector<Device::Range> Executable::arenas() const {
  return {{arena_.data(), arena_.size()}, {lateArena_.data(), lateArena_.size()}};
}

namespace {
const std::string kParamView = "param view";

// Where a param view points: the element offset of its static points, and the run-time
// points to add (checked by checkIndices before).
void viewGeometry(const ir::Op &op, const std::vector<int64_t> &xShape, const std::function<int64_t(sym::ExprRef)> &eval,
                  OpPlan &p) {
  ir::IndexAttrs ix = ir::IndexAttrs::of(op);
  p.viewOffset = 0;
  p.viewPoints.clear();
  int64_t stride = 1;
  size_t operand = op.operands.size();
  for (size_t a = xShape.size(); a-- > 0;) {
    if (ix.isPoint(a)) {
      if (ix.starts[a]) {
        int64_t v = eval(ix.starts[a]);
        p.viewOffset += (v < 0 ? v + xShape[a] : v) * stride;
      } else {
        p.viewPoints.push_back({--operand, xShape[a], stride});
      }
    }
    stride *= xShape[a];
  }
}

int64_t viewOffset(const OpPlan &p, const std::vector<const Tensor *> &in) {
  int64_t offset = p.viewOffset;
  for (const OpPlan::Point &point : p.viewPoints) {
    int64_t v = in[point.operand]->getInt(0);
    offset += (v < 0 ? v + point.dim : v) * point.stride;
  }
  return offset;
}

// `r` at `offset` in an arena of `limit` bytes: the plan must keep it inside.
int64_t placed(const std::string &kernel, const ir::Value &r, int64_t offset, int64_t size, int64_t limit) {
  if (offset < 0 || offset + size > limit)
    throw InternalError(fmt::format("{}: the plan puts {} at [{}, {}) outside the {}-byte arena", kernel, r.type.str(),
                                    offset, offset + size, limit));
  return offset;
}
} // namespace

void Executable::planOp(size_t index, OpPlan &p) const {
  const OpEntry &e = ops_[index];
  const ir::Op &op = *e.op;
  const ir::Binding &b = plan_->binding;
  p.state = OpPlan::State::Dynamic;
  if (op.kind == ir::OpKind::For) {
    if (op.has("lo") && namesOnly(op.get<sym::ExprRef>("lo"), b) && namesOnly(op.get<sym::ExprRef>("hi"), b)) {
      p.lo = *sym::evaluate(op.get<sym::ExprRef>("lo"), b);
      p.hi = *sym::evaluate(op.get<sym::ExprRef>("hi"), b);
      p.state = OpPlan::State::Planned;
    }
    return;
  }
  if (!dimsBound(op, b))
    return;
  const std::string &name = e.view ? kParamView : e.kernel >= 0 ? kernels_[e.kernel].name : ir::opInfo(op.kind).spelling;
  auto eval = [&](sym::ExprRef x) { return evaluateAtLaunch(name, x, b); };
  if (e.view) {
    viewGeometry(op, shapeOf(op.operands[0]->type, eval), eval, p);
    p.shapes = {shapeOf(op.results[0]->type, eval)};
  } else if (e.kernel >= 0) {
    const KernelInfo &info = kernels_[e.kernel];
    // A GEMM variant's dims are bound by launchFor itself (any variant's will do here).
    ir::Binding withVariant;
    if (info.gemmM)
      withVariant = b, bindGemmVariant(0, withVariant);
    const ir::Binding &known = info.gemmM ? withVariant : b;
    for (const std::string &n : info.dims)
      if (!known.count(n))
        return;
    for (sym::ExprRef x : {info.parallelExtent, info.gridX, info.gridY})
      if (x && !namesOnly(x, known))
        return;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<int64_t> offsets;
    for (const ir::Value *r : op.results) {
      if (arenaPlan_.late.count(r)) // the late arena is sized at a sync point of each run
        return;
      shapes.push_back(shapeOf(r->type, eval));
      auto planned = arenaPlan_.offsets.find(r);
      offsets.push_back(planned == arenaPlan_.offsets.end()
                            ? -1
                            : placed(name, *r, eval(planned->second), eval(r->type.bytes()),
                                     static_cast<int64_t>(plan_->arenaBytes)));
    }
    p.launch = launchFor(info, b);
    p.shapes = std::move(shapes);
    p.offsets = std::move(offsets);
    if (profiling_)
      if (sym::ExprRef f = ir::flopCount(op))
        p.flops = static_cast<double>(eval(f));
  }
  p.state = OpPlan::State::Planned; // a host op: its checks only
}

void Executable::launch(size_t index, const std::vector<const Tensor *> &in, std::vector<Tensor> &out, const Launch &l,
                        double flops) {
  size_t kernel = static_cast<size_t>(ops_[index].kernel);
  const KernelInfo &info = kernels_[kernel];
  ++launched_;
  if (!profiling_)
    return device_->launch(kernel, info, in, out, l);
  auto start = std::chrono::steady_clock::now();
  device_->launch(kernel, info, in, out, l);
  double bytes = 0;
  for (const Tensor *t : in)
    bytes += static_cast<double>(t->byteSize());
  for (const Tensor &t : out)
    bytes += static_cast<double>(t.byteSize());
  record(index, info.name, start, flops, bytes);
  OpTime &t = times_[index];
  t.kernel = true;
  if (l.gemmVariant >= 0 && std::find(t.gemmVariants.begin(), t.gemmVariants.end(), l.gemmVariant) == t.gemmVariants.end())
    t.gemmVariants.push_back(l.gemmVariant);
}

void Executable::record(size_t index, const std::string &name, std::chrono::steady_clock::time_point start, double flops,
                        double bytes) {
  OpTime &t = times_[index];
  t.op = ops_[index].op;
  t.name = name;
  ++t.calls;
  t.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  t.flops += flops;
  t.bytes += bytes;
}

bool Executable::runOp(size_t index, OpPlan &p, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
                       const ir::Binding &b) {
  const OpEntry &e = ops_[index];
  const ir::Op &op = *e.op;
  if (e.kernel < 0 && !e.view)
    return false;
  const std::string &name = e.view ? kParamView : kernels_[e.kernel].name;
  auto eval = [&](sym::ExprRef x) { return evaluateAtLaunch(name, x, b); };
  if (e.readsIndices) // the host checks them (and a view's offset comes from them)
    device_->hostReads({in.begin() + 1, in.end()}, false);
  if (e.readsIndices || !p.checked) // static points: once per binding
    checkIndices(op, in, eval);
  bool planned = p.state == OpPlan::State::Planned;
  if (e.view) {
    const Tensor &x = *in[0];
    OpPlan now; // unplanned: what this run evaluates itself
    if (!planned) {
      viewGeometry(op, x.shape, eval, now);
      now.shapes = {shapeOf(op.results[0]->type, eval)};
    }
    const OpPlan &v = planned ? p : now;
    out.push_back(Tensor::view(x.dtype, v.shapes[0],
                               const_cast<uint8_t *>(x.data()) + viewOffset(v, in) * static_cast<int64_t>(dtypeBytes(x.dtype))));
    return true;
  }
  if (planned) {
    for (size_t k = 0; k < op.results.size(); ++k) {
      DType dtype = op.results[k]->type.dtype;
      out.push_back(p.offsets[k] < 0 ? unplanned(op.results[k], p.shapes[k])
                                     : Tensor::view(dtype, p.shapes[k], arena_.data() + p.offsets[k]));
    }
    launchUnlessPacked(index, in, out, p.launch, p.flops);
    return true;
  }
  for (const ir::Value *r : op.results) {
    std::vector<int64_t> shape = shapeOf(r->type, eval);
    auto planned = arenaPlan_.offsets.find(r);
    if (planned == arenaPlan_.offsets.end()) {
      out.push_back(unplanned(r, std::move(shape)));
      continue;
    }
    bool late = arenaPlan_.late.count(r) != 0;
    if (late && lateArenaBytes_ < 0) {
      // The first late value whose binding knows every dim of the late arena sizes it;
      // late values made before that (other sync points still ahead) get memory of their
      // own, which cannot overlap the arena.
      if (!namesOnly(arenaPlan_.lateBytes, b)) {
        out.push_back(Tensor::uninitialized(r->type.dtype, shape));
        continue;
      }
      lateArenaBytes_ = static_cast<int64_t>(arenaSize(arenaPlan_.lateBytes, b));
      if (lateArena_.size() < static_cast<size_t>(lateArenaBytes_)) {
        growArena(lateArena_, static_cast<size_t>(lateArenaBytes_));
        device_->setArenas(arenas());
      }
    }
    std::vector<uint8_t> &arena = late ? lateArena_ : arena_;
    int64_t offset = placed(name, *r, eval(planned->second), eval(r->type.bytes()), late ? lateArenaBytes_ : arenaBytes_);
    out.push_back(Tensor::view(r->type.dtype, std::move(shape), arena.data() + offset));
  }
  double flops = 0;
  if (profiling_)
    if (sym::ExprRef f = ir::flopCount(op))
      flops = static_cast<double>(eval(f));
  launchUnlessPacked(index, in, out, launchFor(kernels_[e.kernel], b), flops);
  return true;
}

namespace {
// Whether `t` holds values of that type (a default-made tensor is a scalar without bytes).
bool fits(const Tensor &t, DType dtype, const std::vector<int64_t> &shape) {
  return t.dtype == dtype && t.shape == shape && (t.isView() || t.bytes.size() == t.byteSize());
}
} // namespace

// A result outside the arena: in the caller's memory when it is an output runInPlace
// writes there (a view of it, so the kernel writes it in place), else memory of its own.
Tensor Executable::unplanned(const ir::Value *r, std::vector<int64_t> shape) {
  if (auto it = into_.find(r); it != into_.end()) {
    Tensor &dest = *it->second.tensor;
    if (!fits(dest, r->type.dtype, shape)) {
      if (it->second.update) // an update has its target's type, so this cannot be
        throw InternalError(fmt::format("an update of type {} does not fit its target {}", r->type.str(), dest.typeText()));
      dest = Tensor::uninitialized(r->type.dtype, shape); // an output slot of another shape: made anew
      ++outputAllocations_;
    }
    return Tensor::view(dest.dtype, dest.shape, dest.data());
  }
  if (yields_.count(r))
    ++outputAllocations_;
  return Tensor::uninitialized(r->type.dtype, std::move(shape));
}

// Params are constants once the model loads: a prepacked weight kept in the arena since an
// earlier call from this same param memory is there already, and its kernel is skipped.
void Executable::launchUnlessPacked(size_t index, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
                                    const Launch &l, double flops) {
  const ir::Op &op = *ops_[index].op;
  bool kept = op.kind == ir::OpKind::Prepack && arenaPlan_.kept.count(op.results[0]);
  if (kept && packedFrom_[&op] == in[0]->data())
    return;
  launch(index, in, out, l, flops);
  if (kept)
    packedFrom_[&op] = in[0]->data();
}

// One run's walk of the graph: values by op result, regions in program order, control
// flow decided on the host. Every op is a kernel launch, a param view, a host op or
// structure; the host reads device results only through Device::hostReads.
class Walk {
public:
  Walk(Executable &exe) : exe_(exe) {}
  std::unordered_map<const ir::Value *, Tensor> values;

  void hostReads(const std::vector<const Tensor *> &reads) { exe_.device_->hostReads(reads, true); }
  std::vector<const Tensor *> valuesOf(const std::vector<ir::Value *> &vs) const {
    std::vector<const Tensor *> out;
    for (const ir::Value *v : vs)
      out.push_back(&values.at(v));
    return out;
  }
  void setResult(const ir::Op &op, const ir::Value *v, Tensor t, ir::Binding &b) {
    ir::bindResult(op, *v, t, b);
    values[v] = std::move(t);
  }
  void region(const ir::Region &r, ir::Binding &b) {
    for (const ir::Op *op : r.ops)
      execute(*op, b);
  }

  void execute(const ir::Op &op, ir::Binding &b) {
    ++exe_.opsExecuted_;
    switch (op.kind) {
    case ir::OpKind::Param: return; // bound before the walk
    case ir::OpKind::AssertDims: return assertDims(op, b);
    case ir::OpKind::If: return branch(op, b);
    case ir::OpKind::For:
    case ir::OpKind::While: return loop(op, b);
    default: break;
    }
    size_t index = exe_.opIndex_.at(&op);
    OpPlan &p = exe_.plan_->ops[index];
    if (!p.checked) {
      for (auto [maker, r] : ir::madeValues(op))
        if (!exe_.plan_->check.sizeChecked(r))
          ir::checkValueSize(*maker, *r, b);
      ir::checkBeforeRunning(op, b); // the same error on every device, before any kernel runs
    }
    if (p.state == OpPlan::State::Unplanned) // after the checks: their errors come first
      exe_.planOp(index, p);
    std::vector<const Tensor *> in = valuesOf(op.operands);
    std::vector<Tensor> out;
    bool made = false;
    try {
      made = exe_.runOp(index, p, in, out, b);
    } catch (const DataError &e) { // its indices' check
      ir::rethrowAt(op, e);
    }
    if (!made) {
      const HostOp *host = findHostOp(op.kind);
      if (!host)
        throw InternalError(fmt::format("{} has neither a kernel nor a host implementation", ir::opWhere(op)));
      hostReads(in); // a sync point: the host reads what kernels made
      auto start = std::chrono::steady_clock::now();
      try {
        out = host->run(HostOpContext{op, in, b, exe_.updatesCarried_.count(&op) != 0});
      } catch (const DataError &e) {
        ir::rethrowAt(op, e);
      }
      for (const ir::Value *r : op.results)
        exe_.outputAllocations_ += exe_.yields_.count(r);
      if (exe_.profiling_)
        exe_.record(index, host->name, start, 0, 0);
    }
    bool planned = p.state == OpPlan::State::Planned;
    p.checked = planned;
    if (exe_.tracing_)
      exe_.traceOp(op, in, out, exe_.ops_[index].view);
    for (size_t k = 0; k < out.size(); ++k) {
      if (made && planned) // made at the shapes its type gives under this binding: nothing to bind
        values[op.results[k]] = std::move(out[k]);
      else
        setResult(op, op.results[k], std::move(out[k]), b);
    }
  }

private:
  // An assert over the input dims holds at every call with them once it held.
  void assertDims(const ir::Op &op, const ir::Binding &b) {
    OpPlan &p = exe_.plan_->ops[exe_.opIndex_.at(&op)];
    if (p.checked)
      return;
    ir::checkAssert(op, b);
    const ir::Binding &inputs = exe_.plan_->binding;
    p.checked = std::holds_alternative<sym::ExprRef>(op.attrs.at("lhs")) &&
                namesOnly(op.get<sym::ExprRef>("lhs"), inputs) && namesOnly(op.get<sym::ExprRef>("rhs"), inputs);
  }

  void branch(const ir::Op &op, ir::Binding &b) {
    hostReads({&values.at(op.operands[0])});
    const ir::Region &taken = *op.regions[values.at(op.operands[0]).get(0) != 0 ? 0 : 1];
    ir::Binding inner = b;
    region(taken, inner);
    hostReads(valuesOf(taken.yields));
    for (size_t k = 0; k < op.results.size(); ++k)
      setResult(op, op.results[k], values.at(taken.yields[k]), b);
  }

  // A for loop runs its body over [lo, hi) (dim expressions, or run-time operands before
  // the carried values); a while loop runs it while its condition region yields true. Each
  // iteration binds the loop-variant dims of the region's arguments afresh.
  void loop(const ir::Op &op, ir::Binding &b) {
    bool isFor = op.kind == ir::OpKind::For;
    const ir::Region &body = *op.regions.back();
    hostReads(valuesOf(op.operands));
    size_t carriedFrom = 0;
    int64_t lo = 0, hi = 0;
    if (isFor && op.has("lo")) {
      size_t index = exe_.opIndex_.at(&op);
      OpPlan &p = exe_.plan_->ops[index];
      if (p.state == OpPlan::State::Unplanned)
        exe_.planOp(index, p);
      bool planned = p.state == OpPlan::State::Planned;
      lo = planned ? p.lo : *sym::evaluate(op.get<sym::ExprRef>("lo"), b);
      hi = planned ? p.hi : *sym::evaluate(op.get<sym::ExprRef>("hi"), b);
    } else if (isFor) {
      lo = values.at(op.operands[0]).getInt(0);
      hi = values.at(op.operands[1]).getInt(0);
      carriedFrom = 2;
    }
    std::vector<Tensor> carried;
    for (size_t k = carriedFrom; k < op.operands.size(); ++k)
      carried.push_back(values.at(op.operands[k]));
    if (exe_.tracing_)
      exe_.traceCopies(op, carried, {op.operands.begin(), op.operands.end()}, valuesOf(op.operands), false);
    auto enter = [&](const ir::Region &r, std::optional<int64_t> i, ir::Binding &inner) {
      size_t a = 0;
      if (i) {
        Tensor counter = Tensor::zeros(DType::I64, {});
        counter.setInt(0, *i);
        values[r.args[a++]] = std::move(counter);
      }
      // The region's args view the carried values (no op writes an arg: the planner places
      // results in the arena; an iteration's yields, which may be args, are copied before
      // they replace `carried`).
      for (Tensor &t : carried) {
        std::string err = ir::unify(r.args[a]->type, t.shape, inner);
        if (!err.empty())
          throw InternalError(fmt::format("{}: a carried value no longer fits its loop type: {}", ir::opWhere(op), err));
        values[r.args[a++]] = Tensor::view(t.dtype, t.shape, t.data());
      }
    };
    auto iterate = [&](std::optional<int64_t> i) {
      ir::Binding inner = b;
      enter(body, i, inner);
      region(body, inner);
      std::vector<const Tensor *> yields = valuesOf(body.yields);
      hostReads(yields);
      // Every yield copied before the values its args view go; a yield that is its own
      // slot's carried buffer (updated in place, or passed through) keeps that buffer.
      std::vector<Tensor> next(carried.size());
      std::vector<size_t> kept;
      for (size_t k = 0; k < carried.size(); ++k) {
        const Tensor &y = values.at(body.yields[k]);
        if (y.isView() && y.data() == carried[k].data() && y.byteSize() == carried[k].byteSize())
          kept.push_back(k);
        else
          next[k] = y;
      }
      for (size_t k : kept)
        next[k] = std::move(carried[k]);
      carried = std::move(next);
      if (exe_.tracing_)
        exe_.traceCopies(op, carried, {body.yields.begin(), body.yields.end()}, yields, true);
    };
    if (isFor) {
      // The first step is walked: it checks and plans every body op under this binding.
      int64_t i = lo;
      if (i < hi)
        iterate(i++);
      std::string why = i < hi ? refusal(op, body) : "fewer than two iterations (the first is always walked)";
      size_t launches = 0;
      if (why.empty())
        launches = replay(op, body, carried, i, hi);
      else
        for (; i < hi; ++i)
          iterate(i);
      exe_.noteLoop(op, why, std::max<int64_t>(0, hi - lo), launches);
    } else {
      const ir::Region &cond = *op.regions[0];
      int64_t maxIterations = limit(Limit::Iterations); // 0: no limit
      for (int64_t done = 0;; ++done) {
        ir::Binding inner = b;
        enter(cond, std::nullopt, inner);
        region(cond, inner);
        hostReads(valuesOf(cond.yields));
        if (values.at(cond.yields[0]).get(0) == 0)
          break;
        if (maxIterations > 0 && done >= maxIterations)
          throw DataError(fmt::format("{} ran {} iterations and its condition still holds (--max-iterations {})",
                                      ir::opWhere(op), done, maxIterations));
        iterate(std::nullopt);
      }
    }
    for (size_t k = 0; k < op.results.size(); ++k)
      setResult(op, op.results[k], std::move(carried[k]), b);
  }

  // What keeps a for loop whose first step ran from running the rest compiled (empty:
  // nothing); Executable.h, loop paths.
  std::string refusal(const ir::Op &op, const ir::Region &body) const {
    if (const std::string &fixed = exe_.loopRefusal_.at(&op); !fixed.empty())
      return fixed;
    if (!exe_.compiledLoops_)
      return "compiled loops are off";
    if (!exe_.device_->hostMemory())
      return "the device keeps memory of its own";
    if (exe_.tracing_)
      return "the memory trace follows the walk";
    const ir::Binding &inputs = exe_.plan_->binding;
    for (size_t a = 1; a < body.args.size(); ++a)
      for (sym::ExprRef d : body.args[a]->type.dims)
        if (!namesOnly(d, inputs))
          return fmt::format("carried value {} of type {} changes shape", a - 1, body.args[a]->type.str());
    for (const ir::Op *o : body.ops) {
      const OpPlan &p = exe_.plan_->ops[exe_.opIndex_.at(o)];
      bool unplanned = o->kind == ir::OpKind::AssertDims ? !p.checked : p.state != OpPlan::State::Planned;
      if (unplanned || (o->kind == ir::OpKind::DimValue && !namesOnly(o->get<sym::ExprRef>("value"), inputs)))
        return fmt::format("{} names a dim bound per iteration", ir::opWhere(*o));
    }
    return {};
  }

  // Steps [i, hi) of a for loop whose first step was walked and whose refusal() is
  // empty: every body op is planned, so its operands and results lie at the same memory
  // in every step (arena offsets, the buffers the first step allocated, params, values
  // from outside the loop) and its launch is the same; a param view at the counter moves
  // its view each step. The carried values stay in `carried`, which the body's args
  // view; each step writes the counter, replays the launches and copies the yields over
  // `carried`. Returns the kernel launches per step.
  size_t replay(const ir::Op &op, const ir::Region &body, std::vector<Tensor> &carried, int64_t i, int64_t hi) {
    for (size_t k = 0; k < carried.size(); ++k)
      values[body.args[k + 1]] = Tensor::view(carried[k].dtype, carried[k].shape, carried[k].data());
    Tensor &counter = values.at(body.args[0]);
    struct Step {
      size_t index;
      const OpPlan *plan;
      std::vector<const Tensor *> in;
      std::vector<Tensor> out;
    };
    std::vector<Step> steps;
    for (const ir::Op *o : body.ops) {
      size_t index = exe_.opIndex_.at(o);
      const Executable::OpEntry &e = exe_.ops_[index];
      if ((e.view && !e.readsIndices) || sameEveryStep(*o) || o->kind == ir::OpKind::AssertDims)
        continue; // the same value every step; an assert that held
      Step s{index, &exe_.plan_->ops[index], valuesOf(o->operands), {}};
      if (!e.view)
        for (const ir::Value *r : o->results) {
          Tensor &t = values.at(r);
          s.out.push_back(Tensor::view(t.dtype, t.shape, t.data()));
        }
      // Indices read from the counter (or fixed through the loop): the first step checked
      // `lo`; the range an op accepts is an interval, so `hi - 1` checked too covers every step.
      if (e.readsIndices) {
        counter.setInt(0, hi - 1);
        const std::string &name = e.view ? kParamView : exe_.kernels_[e.kernel].name;
        try {
          checkIndices(*o, s.in, [&](sym::ExprRef x) { return evaluateAtLaunch(name, x, exe_.plan_->binding); });
        } catch (const DataError &e) { // located as the walk's are
          ir::rethrowAt(*o, e);
        }
      }
      steps.push_back(std::move(s));
    }
    struct Copy {
      uint8_t *to;
      const Tensor *from; // its slot: a param view at the counter moves
      size_t bytes;
    };
    std::vector<Copy> copies; // carried <- yield, unless the yield is that carried value
    for (size_t k = 0; k < carried.size(); ++k) {
      const Tensor &y = values.at(body.yields[k]);
      if (y.byteSize() != carried[k].byteSize())
        throw InternalError(fmt::format("{}: carried value {} changed size in a planned loop", ir::opWhere(op), k));
      if (body.yields[k] != body.args[k + 1])
        copies.push_back({carried[k].data(), &y, y.byteSize()});
    }
    size_t launches = 0;
    for (const Step &s : steps)
      launches += !s.out.empty();
    for (; i < hi; ++i) {
      counter.setInt(0, i);
      for (Step &s : steps) {
        if (s.out.empty()) { // a param view at the counter: its readers hold its slot
          const Tensor &x = *s.in[0];
          values.at(exe_.ops_[s.index].op->results[0]) =
              Tensor::view(x.dtype, s.plan->shapes[0],
                           const_cast<uint8_t *>(x.data()) + viewOffset(*s.plan, s.in) * static_cast<int64_t>(dtypeBytes(x.dtype)));
          continue;
        }
        exe_.launchUnlessPacked(s.index, s.in, s.out, s.plan->launch, s.plan->flops);
      }
      exe_.opsExecuted_ += body.ops.size();
      for (const Copy &c : copies)
        if (c.bytes) // an empty carried value may have no memory at all (null data)
          std::memcpy(c.to, c.from->data(), c.bytes);
    }
    return launches;
  }

  Executable &exe_;
};

LaunchPlan &Executable::planFor(const std::vector<Tensor> &inputs, const ir::Binding &preset) {
  std::vector<int64_t> key = LaunchPlanCache::keyOf(inputs);
  if (LaunchPlan *p = plans_.find(key, preset)) {
    ++plannedRuns_;
    return *p;
  }
  auto p = std::make_unique<LaunchPlan>();
  std::vector<const Tensor *> given;
  for (const Tensor &t : inputs)
    given.push_back(&t);
  p->binding = ir::bindInputs(*graph_, given, preset);
  p->check.check(*graph_, p->binding); // each value's size first: its error names the op
  if (arenaPlan_.bytes)
    p->arenaBytes = arenaSize(arenaPlan_.bytes, p->binding);
  p->key = std::move(key);
  p->preset = preset;
  p->ops.resize(ops_.size());
  return plans_.insert(std::move(p));
}

std::vector<Tensor> Executable::run(const std::vector<Tensor> &inputs, const std::map<std::string, Tensor> &params,
                                    const ir::Binding &preset) {
  into_.clear();
  device_->setResident({}); // what a runInPlace left on the device comes back first
  std::vector<Tensor> out;
  walkGraph(inputs, params, preset, [&](Walk &walk) {
    const std::vector<ir::Value *> &yields = graph_->body.yields;
    walk.hostReads(walk.valuesOf(yields));
    for (const ir::Value *y : yields) {
      // A result with bytes of its own moves out: a copy costs the caller a second
      // allocation and a pass over it per call (3 MB of fresh pages for a [512, 1536]
      // output, more time than the kernel), and the walk drops it anyway (views of it
      // keep pointing at the same bytes). A view (an arena slot, an input or a param)
      // and a value yielded twice are copied.
      Tensor &t = walk.values.at(y);
      if (!t.isView() && std::count(yields.begin(), yields.end(), y) == 1) {
        out.push_back(std::move(t));
        continue;
      }
      out.push_back(t);
      ++outputAllocations_;
    }
  });
  return out;
}

void Executable::runInPlace(std::vector<Tensor> &inputs, std::map<std::string, Tensor> &params, std::vector<Tensor> &outputs,
                            const ir::Binding &preset) {
  const ir::Region &body = graph_->body;
  outputs.resize(body.yields.size());
  into_.clear();
  std::vector<bool> updated(body.yields.size(), false);
  std::vector<Device::Range> resident;
  for (const ir::Graph::Update &u : updates_) {
    Tensor *target = nullptr;
    if (u.param.empty()) {
      if (u.input < inputs.size())
        target = &inputs[u.input];
    } else if (auto it = params.find(u.param); it != params.end()) {
      target = &it->second;
    }
    if (!target) // the binding below reports a missing input or param
      continue;
    into_[body.yields[u.output]] = {target, true};
    updated[u.output] = true;
    resident.emplace_back(target->data(), target->byteSize());
  }
  for (size_t k = 0; k < body.yields.size(); ++k)
    if (!updated[k])
      into_.emplace(body.yields[k], Into{&outputs[k], false}); // the first such position of a value yielded twice
  device_->setResident(resident);
  walkGraph(inputs, params, preset, [&](Walk &walk) {
    // Whatever is not in its place yet (made by a host op or control flow, yielded twice,
    // an input or param passed through) is copied there; updates written in place stay
    // where a device with memory of its own has them, until syncToHost.
    std::vector<Tensor *> dest(body.yields.size());
    std::vector<const Tensor *> reads;
    for (size_t k = 0; k < body.yields.size(); ++k) {
      dest[k] = updated[k] ? into_.at(body.yields[k]).tensor : &outputs[k];
      if (walk.values.at(body.yields[k]).data() != dest[k]->data() || !updated[k])
        reads.push_back(&walk.values.at(body.yields[k]));
    }
    walk.hostReads(reads);
    for (size_t k = 0; k < body.yields.size(); ++k) {
      const Tensor &v = walk.values.at(body.yields[k]);
      if (v.data() == dest[k]->data() && v.shape == dest[k]->shape)
        continue;
      if (!fits(*dest[k], v.dtype, v.shape)) {
        if (updated[k])
          throw InternalError(fmt::format("an update of type {} does not fit its target {}", v.typeText(), dest[k]->typeText()));
        *dest[k] = Tensor::uninitialized(v.dtype, v.shape);
        ++outputAllocations_;
      }
      std::copy(v.data(), v.data() + v.byteSize(), dest[k]->data());
      if (updated[k]) // the host's copy is now the newest: the device's is stale
        std::erase(resident, Device::Range{dest[k]->data(), dest[k]->byteSize()});
    }
  });
  device_->setResident(resident);
  into_.clear();
  // New values in the same memory: a prepacked copy of the old ones is stale, and so is a
  // device's copy of a param not updated in place (resident memory's copies are the newest).
  if (std::any_of(updates_.begin(), updates_.end(), [](const ir::Graph::Update &u) { return !u.param.empty(); }))
    paramsChanged();
}

void Executable::syncToHost(const std::vector<const Tensor *> &tensors) { device_->hostReads(tensors, false); }

void Executable::releaseResident() { device_->setResident({}); }

void Executable::walkGraph(const std::vector<Tensor> &inputs, const std::map<std::string, Tensor> &params,
                           const ir::Binding &preset, const std::function<void(Walk &)> &finish) {
  auto start = std::chrono::steady_clock::now();
  arenaBytes_ = 0;
  lateArenaBytes_ = -1;
  opsExecuted_ = 0;
  outputAllocations_ = 0;
  loopPaths_.clear();
  plan_ = &planFor(inputs, preset);
  binding_ = plan_->binding;
  if (arenaPlan_.bytes) {
    arenaBytes_ = static_cast<int64_t>(plan_->arenaBytes);
    growArena(arena_, plan_->arenaBytes);
  }
  std::vector<const Tensor *> paramTensors;
  for (const auto &[name, t] : params)
    paramTensors.push_back(&t);
  if (paramsChangeEveryRun_)
    device_->paramsChanged();
  device_->beginRun(paramTensors, arenas());
  Walk walk(*this);
  // Inputs and params are seen in place (views): read, and written only by the updates
  // runInPlace writes there.
  auto inPlace = [](const Tensor &t) { return Tensor::view(t.dtype, t.shape, const_cast<uint8_t *>(t.data())); };
  for (size_t k = 0; k < inputs.size(); ++k)
    walk.values[graph_->body.args[k]] = inPlace(inputs[k]);
  for (const ir::Op *op : graph_->body.ops) {
    if (op->kind != ir::OpKind::Param)
      continue;
    const std::string &name = op->get<std::string>("name");
    auto it = params.find(name);
    if (it == params.end())
      throw DataError(fmt::format("no value for param '{}'", name));
    walk.setResult(*op, op->results[0], inPlace(it->second), binding_);
  }
  walk.region(graph_->body, binding_);
  finish(walk);
  if (profiling_) {
    ++profiledRuns_;
    profiledSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

void Executable::setProfiling(bool on) {
  if (on != profiling_)
    plans_.clear(); // plans made while it was off hold no FLOP counts
  profiling_ = on;
  times_.assign(on ? ops_.size() : 0, OpTime{});
  profiledRuns_ = 0;
  profiledSeconds_ = 0;
  loopTimes_.clear();
}

void Executable::noteLoop(const ir::Op &op, const std::string &why, int64_t steps, size_t launches) {
  auto add = [&](LoopTime &t) { // the latest path and reason, the steps of all
    t.op = &op;
    t.why = why;
    ++t.runs;
    t.steps += steps;
    t.launches = launches;
  };
  auto it = std::find_if(loopPaths_.begin(), loopPaths_.end(), [&](const LoopTime &t) { return t.op == &op; });
  add(it != loopPaths_.end() ? *it : loopPaths_.emplace_back());
  if (profiling_)
    add(loopTimes_[&op]);
}

void Executable::setMemoryTracing(bool on) {
  tracing_ = on;
  trace_ = MemoryTrace{};
}

void Executable::traceOp(const ir::Op &op, const std::vector<const Tensor *> &in, const std::vector<Tensor> &out, bool view) {
  MemoryEvent e;
  e.op = &op;
  e.reads.assign(op.operands.begin(), op.operands.end());
  for (const Tensor *t : in)
    e.readData.push_back(t->data());
  // Reads inside a fused op's body are of its operands already; reads by ops nested in
  // control flow are traced by those ops when they run.
  auto within = [](const uint8_t *p, const uint8_t *base, size_t size) { return size && p >= base && p < base + size; };
  for (size_t k = 0; k < out.size() && k < op.results.size(); ++k) {
    MemoryEvent::Made m;
    m.value = op.results[k];
    m.bytes = static_cast<int64_t>(out[k].byteSize());
    m.data = out[k].data();
    bool aliases = view;
    for (const Tensor *t : in)
      aliases = aliases || within(m.data, t->data(), t->byteSize());
    if (view) { // a param view, or a view of a param's packed copy (which is in the arena)
      m.where = Placement::View;
    } else if (within(m.data, arena_.data(), arena_.size())) {
      m.where = Placement::Arena;
      trace_.arenaHighWater = std::max(trace_.arenaHighWater, static_cast<int64_t>(m.data - arena_.data()) + m.bytes);
    } else if (within(m.data, lateArena_.data(), lateArena_.size())) {
      m.where = Placement::Arena;
    } else if (aliases) {
      m.where = Placement::View;
    } else {
      trace_.allocatedBytes += m.bytes;
    }
    e.made.push_back(m);
  }
  trace_.events.push_back(std::move(e));
}

// A loop's carried values are copies the executor owns (Tensor's copy owns its bytes:
// the arena slot of the yield that made them is reused in the next iteration), made at
// the loop's entry and written again after every iteration: memory no op makes, which
// the trace charges to the loop. A compiled loop holds one buffer per carried value
// through all its steps (replay), so only the entry's copies count as allocated.
void Executable::traceCopies(const ir::Op &loop, const std::vector<Tensor> &carried, const std::vector<const ir::Value *> &reads,
                             const std::vector<const Tensor *> &readData, bool step) {
  MemoryEvent e;
  e.op = &loop;
  e.loopStep = step;
  e.reads = reads;
  for (const Tensor *t : readData)
    e.readData.push_back(t->data());
  for (size_t k = 0; k < carried.size() && k < loop.results.size(); ++k) {
    MemoryEvent::Made m{loop.results[k], static_cast<int64_t>(carried[k].byteSize()), Placement::Allocated, carried[k].data()};
    if (!step)
      trace_.allocatedBytes += m.bytes;
    e.made.push_back(m);
  }
  trace_.events.push_back(std::move(e));
}

Executable::Profile Executable::profile() const {
  Profile p;
  for (const OpTime &t : times_)
    if (t.calls)
      p.ops.push_back(t);
  for (const auto &[op, t] : loopTimes_)
    p.loops.push_back(t);
  std::sort(p.loops.begin(), p.loops.end(),
            [&](const LoopTime &a, const LoopTime &b) { return opIndex_.at(a.op) < opIndex_.at(b.op); });
  p.runs = profiledRuns_;
  p.seconds = profiledSeconds_;
  return p;
}

} // namespace dnnc::rt
