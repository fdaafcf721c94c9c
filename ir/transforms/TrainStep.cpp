// See TrainStep.h.
#include "ir/transforms/TrainStep.h"

#include "base/Error.h"
#include "ir/graph/OpRegistry.h"
#include "ir/transforms/Dropout.h"
#include "ir/transforms/GraphBuilder.h"
#include "ir/transforms/MemoryPlan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <set>

namespace dnnc::ir {

const std::vector<std::string> &optimizerNames() {
  static const std::vector<std::string> names{"sgd", "momentum", "adam", "adamw"};
  return names;
}

std::optional<Optimizer> parseOptimizer(const std::string &name) {
  const std::vector<std::string> &names = optimizerNames();
  auto it = std::find(names.begin(), names.end(), name);
  if (it == names.end())
    return std::nullopt;
  const Optimizer::Kind kinds[] = {Optimizer::Kind::Sgd, Optimizer::Kind::Momentum, Optimizer::Kind::Adam, Optimizer::Kind::AdamW};
  Optimizer opt;
  opt.kind = kinds[it - names.begin()];
  return opt;
}

std::string unknownOptimizer(const std::string &name) {
  return fmt::format("unknown optimizer '{}' (optimizers: {})", name, fmt::join(optimizerNames(), ", "));
}

namespace {
// The values a gradient of `loss` may flow through: float values only (as in PyTorch,
// where an argmax, a comparison or a cast to an integer ends the graph a gradient follows,
// so a param reached only so gets none), back from `loss` through every op that makes
// one of them, and through the ops of its regions that make their float yields (a loop's
// or branch's captured values). An over-estimate (an op's float operands all count),
// never an under-estimate.
std::set<const Value *> valuesBehind(const Region &body, const Value *loss) {
  std::set<const Value *> behind{loss};
  auto carriesGradient = [](const Value *v) { return isFloat(v->type.dtype); };
  std::function<void(const Region &)> walk = [&](const Region &region) {
    for (auto it = region.ops.rbegin(); it != region.ops.rend(); ++it) {
      const Op &op = **it;
      if (std::none_of(op.results.begin(), op.results.end(), [&](const Value *r) { return behind.count(r) > 0; }))
        continue;
      std::copy_if(op.operands.begin(), op.operands.end(), std::inserter(behind, behind.end()), carriesGradient);
      for (const auto &r : op.regions) {
        std::copy_if(r->yields.begin(), r->yields.end(), std::inserter(behind, behind.end()), carriesGradient);
        walk(*r);
      }
    }
  };
  walk(body);
  return behind;
}
} // namespace

TrainStep makeTrainStep(Graph &g, const Optimizer &opt) {
  Region &body = g.body;
  if (body.yields.empty() || body.yields[0]->type.rank() != 0 || !isFloat(body.yields[0]->type.dtype))
    throw DataError(fmt::format("model '{}' cannot be trained: its first output is the loss and must be a float scalar, not {}",
                                g.name, body.yields.empty() ? "nothing" : body.yields[0]->type.str()));
  TrainStep step;
  step.modelInputs = body.args.size();
  step.metrics = body.yields.size() - 1;
  std::vector<Value *> params;
  size_t frozen = 0;
  std::set<const Value *> behindLoss = valuesBehind(body, body.yields[0]);
  for (Op *op : body.ops)
    if (op->kind == OpKind::Param && isFloat(op->results[0]->type.dtype)) {
      if (op->has("frozen") && op->get<bool>("frozen")) { // `param frozen`: no gradient, no optimizer state
        ++frozen;
        continue;
      }
      if (!behindLoss.count(op->results[0])) {
        step.unreached.push_back(op->get<std::string>("name"));
        continue;
      }
      params.push_back(op->results[0]);
      step.params.push_back(op->get<std::string>("name"));
    }
  if (params.empty())
    throw DataError(!step.unreached.empty()
                        ? fmt::format("model '{}' has no param to train: the loss depends on none of {}", g.name,
                                      fmt::join(step.unreached, ", "))
                    : frozen ? fmt::format("model '{}' has no param to train: all {} of its float params are declared frozen",
                                           g.name, frozen)
                             : fmt::format("model '{}' has no float param to train", g.name));
  Value *loss = body.yields[0];
  SourceRange loc = loss->loc;
  auto input = [&](const std::string &name, TensorType t) {
    Value *v = g.newValue(std::move(t), name, loc);
    v->owner = &body;
    body.args.push_back(v);
    return v;
  };
  bool adam = opt.kind == Optimizer::Kind::Adam || opt.kind == Optimizer::Kind::AdamW;
  step.scalars = adam ? std::vector<std::string>{"lr", "step_size", "bc2_sqrt"} : std::vector<std::string>{"lr"};
  std::vector<Value *> scalars;
  for (const std::string &s : step.scalars)
    scalars.push_back(input(s, {DType::F32, {}}));
  // Dropouts draw from (seed, step): an input, so that one compiled step draws fresh masks.
  if (std::vector<Op *> dropouts = dropoutOps(g); !dropouts.empty()) {
    step.rng = true;
    trainDropouts(dropouts, input("rng", {DType::I64, {sym::constant(2)}}));
  }
  step.stateNames = adam ? std::vector<std::string>{"exp_avg", "exp_avg_sq"}
                         : opt.kind == Optimizer::Kind::Momentum ? std::vector<std::string>{"momentum_buffer"}
                                                                 : std::vector<std::string>{};
  step.statesPerParam = step.stateNames.size();
  std::vector<std::vector<Value *>> states;
  std::vector<size_t> stateInputs; // their indices among the step's inputs
  for (size_t i = 0; i < params.size(); ++i) {
    states.emplace_back();
    for (const std::string &state : step.stateNames)
      stateInputs.push_back(body.args.size()), states.back().push_back(input(fmt::format("{}.{}", step.params[i], state), params[i]->type));
  }
  // d loss / d params: a grad op for the differentiate pass.
  Op *grad = g.newOp(OpKind::Grad, loc);
  grad->shapeClass = opInfo(OpKind::Grad).shapeClass;
  grad->operands.push_back(loss);
  for (Value *p : params) {
    grad->operands.push_back(p);
    Value *r = g.newValue(p->type, "", loc);
    r->def = grad;
    grad->results.push_back(r);
  }
  body.ops.push_back(grad);
  GraphBuilder b(g, analyzerFor(g), loc);
  std::vector<Value *> newParams, newStates;
  for (size_t i = 0; i < params.size(); ++i) {
    Value *p = params[i], *gr = grad->results[i];
    DType dt = p->type.dtype;
    auto k = [&](double v) { return b.constant(v, dt); };
    auto scalar = [&](size_t j) { return dt == DType::F32 ? scalars[j] : b.emit(OpKind::Cast, {scalars[j]}, {{"dtype", dt}}); };
    auto mul = [&](Value *x, Value *y) { return b.emit(OpKind::Mul, {x, y}); };
    auto add = [&](Value *x, Value *y) { return b.emit(OpKind::Add, {x, y}); };
    auto sub = [&](Value *x, Value *y) { return b.emit(OpKind::Sub, {x, y}); };
    Value *lr = scalar(0);
    if (opt.weightDecay != 0 && opt.kind != Optimizer::Kind::AdamW) // L2 in the gradient (torch's weight_decay)
      gr = add(gr, mul(p, k(opt.weightDecay)));
    Value *updated = nullptr;
    if (!adam) {
      Value *direction = gr;
      if (opt.kind == Optimizer::Kind::Momentum) { // buf = μ·buf + g (torch: the first step's buf is g)
        direction = add(mul(states[i][0], k(opt.momentum)), gr);
        newStates.push_back(direction);
      }
      updated = sub(p, mul(direction, lr));
    } else {
      Value *base = p;
      if (opt.kind == Optimizer::Kind::AdamW && opt.weightDecay != 0) // decoupled: p·(1 − lr·λ) first
        base = mul(p, sub(k(1), mul(lr, k(opt.weightDecay))));
      Value *m = add(states[i][0], mul(sub(gr, states[i][0]), k(1 - opt.beta1))); // torch's lerp
      Value *v = add(mul(states[i][1], k(opt.beta2)), mul(mul(gr, gr), k(1 - opt.beta2)));
      Value *denom = add(b.emit(OpKind::Div, {b.emit(OpKind::Sqrt, {v}), scalar(2)}), k(opt.eps));
      updated = sub(base, mul(b.emit(OpKind::Div, {m, denom}), scalar(1)));
      newStates.push_back(m), newStates.push_back(v);
    }
    if (updated->name.empty())
      updated->name = step.params[i];
    newParams.push_back(updated);
  }
  body.ops.insert(body.ops.end(), b.built.begin(), b.built.end());
  body.yields.insert(body.yields.end(), newParams.begin(), newParams.end());
  body.yields.insert(body.yields.end(), newStates.begin(), newStates.end());
  if (!g.outputNames.empty()) // the new outputs unnamed (the model's named outputs are the loss and metrics)
    g.outputNames.resize(body.yields.size());
  size_t at = 1 + step.metrics;
  for (const std::string &name : step.params)
    g.updates.push_back({at++, name, 0});
  for (size_t input : stateInputs)
    g.updates.push_back({at++, "", input});
  return step;
}

} // namespace dnnc::ir
