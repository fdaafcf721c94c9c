// `dnnc profile` (spec training.md §14): where the memory of one call (or, with --train, one
// training step) goes at one binding, planned and measured.
//
// Contract:
// - Planned: the compiled graph's memory plan (ir/transforms/MemoryPlan.h) at the binding —
//   each planned buffer live over its plan lifetime (an in-place result from the position
//   after its operand's last), values the plan leaves to the runtime (outputs, values
//   inside control flow) from their op to their last reader (outputs to the end), params,
//   inputs and optimizer state over the whole step; a for or while loop's results, the
//   buffers the executor copies its carried values into, from the loop's entry through
//   its body to their last reader. A use by a loop op or inside a loop lasts to that
//   loop's end (as the plan's lifetimes do). The sizes are the plan's (types' byte
//   expressions evaluated), never recomputed here.
// - Measured: the executor's memory trace (rt::Executable::MemoryTrace) of one real run at
//   the binding: each result's actual bytes and placement, live from the op that made it
//   to the last op that read its bytes (followed by address; a result written over an
//   operand read for the last time replaces it), the executor's copies of loop-carried
//   values (charged to the loop op: one buffer per carried value from the entry to the
//   last step or reader, followed by value, as a compiled loop holds them; what the entry
//   reads held to the loop's last step), and the arena the runtime allocated. The two
//   accounts agree op by op, in loops too (a position run more than once shows its
//   largest).
// - Categories (the spec's): params (and their prepacked copies, which stay in the arena
//   from call to call); gradients (--train: a backward buffer of a trained
//   param's type read by the optimizer's update, i.e. by an op that also reads a param,
//   an optimizer scalar or a state); optimizer_state (the step's state inputs);
//   stashed (forward values the backward pass reads, kept: the recompute report's);
//   recomputed (results of the ops the recompute pass cloned into the backward pass);
//   workspace (every other intermediate); inputs (the model's, and the optimizer's
//   scalars); outputs (the values the call returns).
// - The peak is the first op position with the most bytes live; the categories are given
//   at it, so they add up to the peak. The forward pass of a training step ends at the op
//   that makes the loss.
// - --svg draws live bytes over the op positions as stacked bands per category, the
//   measured total as a line, the peak marked, forward and backward shaded; for a
//   training step with --recompute auto, the planned total of --recompute none on the
//   same axes.
#include "ir/graph/OpRegistry.h"
#include "ir/graph/Serialize.h"
#include "ir/transforms/TrainStep.h"
#include "base/TensorIO.h"
#include "runtime/ModelIO.h"
#include "tools/dnnc/Driver.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <functional>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace dnnc::tool {

using rt::Tensor;

namespace {

enum Category { kParams, kGradients, kState, kStashed, kRecomputed, kWorkspace, kInputs, kOutputs, kCategories };
// The --json keys (the spec's), and the table's names.
const char *const kKeys[kCategories] = {"params", "gradients", "optimizer_state", "stashed", "recomputed", "workspace", "inputs", "outputs"};
const char *const kNames[kCategories] = {"params",   "gradients", "optimizer state", "stashed activations",
                                         "recomputed", "workspace", "inputs",          "outputs"};
// The bands' colours in the SVG (one per category, in order).
const char *const kColours[kCategories] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

// "312 B", "2 KiB", "1.5 MiB": what the table shows (JSON has the exact bytes).
std::string sizeText(int64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4)
    v /= 1024, ++u;
  std::string s = fmt::format("{:.1f}", v);
  if (s.size() > 2 && s.substr(s.size() - 2) == ".0")
    s.resize(s.size() - 2);
  return s + " " + units[u];
}

std::string xmlText(const std::string &s) {
  std::string out;
  for (char c : s)
    out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}

std::string valueName(const ir::Value *v) { return v->name.empty() ? fmt::format("%{}", v->id) : v->name; }

// One value's row: where it lives in the plan's op order, and what it is.
struct Row {
  const ir::Value *value = nullptr;
  Category category = kWorkspace;
  int64_t bytes = 0;
  int first = 0, last = 0; // planned lifetime, op positions inclusive (first > last: never live on its own)
};

// One compiled and measured call.
struct Profiled {
  std::unique_ptr<ir::Graph> graph;
  backend::Compiled compiled;
  std::vector<const ir::Op *> order;
  std::vector<Row> rows;
  std::unordered_map<const ir::Value *, Category> categoryOf;
  size_t version = 0, versions = 0; // the recompute version by shape profiled, of how many (0: no versions)
  int forwardEnd = -1;                                 // the loss's op position (--train)
  std::vector<std::array<int64_t, kCategories>> planned, measured; // bytes live at each op position
  int plannedPeak = 0, measuredPeak = 0;
  int64_t arenaPlanned = 0, arenaAllocated = 0, arenaHighWater = 0, allocated = 0;
};

int64_t total(const std::array<int64_t, kCategories> &a) {
  int64_t s = 0;
  for (int64_t b : a)
    s += b;
  return s;
}

int peakOf(const std::vector<std::array<int64_t, kCategories>> &curve) {
  int best = 0;
  for (int t = 0; t < static_cast<int>(curve.size()); ++t)
    if (total(curve[t]) > total(curve[best]))
      best = t;
  return best;
}

// An op's reads in the plan's order: its operands (ops in a loop's body have positions of
// their own; a fused op's members read only its operands).
void forEachRead(const ir::Op &op, const std::function<void(const ir::Value *)> &f) {
  for (const ir::Value *v : op.operands)
    f(v);
}

Profiled profileOnce(const ir::Graph &source, const ProfileOptions &o, ir::RecomputeMode mode, const ir::Binding &binding) {
  Profiled p;
  p.graph = ir::cloneGraph(source);
  std::optional<ir::TrainStep> step;
  if (o.train) {
    try {
      step = ir::makeTrainStep(*p.graph, o.optimizer);
    } catch (const DataError &e) {
      throw DataError(fmt::format("--train: {}", e.what()));
    }
  }
  // Params before compiling, as dnnc train makes them (their initializers' streams follow
  // the graph's param order, which the passes may change).
  rt::Weights weights = rt::loadWeights(*p.graph, {{}, true, false, false, o.seed, ""}, binding);
  backend::CompileOptions options = o.compile;
  options.passes.recompute.mode = mode;
  if (o.train)
    options.constantParams = false; // as dnnc train compiles it
  const backend::Target &target = *backend::findTarget(o.device);
  std::unique_ptr<ir::Graph> pristine = ir::cloneGraph(*p.graph); // compiling changes the graph
  p.compiled = backend::compileWithPlan(*p.graph, target, options);
  // With recompute versions by shape, the one dnnc train runs at this binding
  // (RecomputeReport::versionAt: the smallest planned arena there), from each version's plan.
  if (p.compiled.recompute && p.compiled.recompute->versions.size() > 1 && p.compiled.plan) {
    const ir::RecomputeReport &report = *p.compiled.recompute;
    std::vector<sym::ExprRef> arenas{p.compiled.plan->arena};
    for (size_t v = 1; v < report.versions.size(); ++v) {
      std::unique_ptr<ir::Graph> copy = ir::cloneGraph(*pristine);
      backend::CompileOptions version = options;
      version.passes.recompute.version = v;
      backend::Lowered lowered = backend::lowerFor(*copy, target, version);
      arenas.push_back(lowered.plan ? lowered.plan->arena : nullptr);
    }
    std::vector<const Tensor *> none(pristine->body.args.size(), nullptr);
    p.versions = report.versions.size();
    p.version = report.versionAt(ir::bindInputs(*pristine, none, binding), arenas);
    if (p.version != 0) {
      backend::CompileOptions version = options;
      version.passes.recompute.version = p.version;
      p.graph = ir::cloneGraph(*pristine);
      p.compiled = backend::compileWithPlan(*p.graph, target, version);
    }
  }
  ir::Graph &g = *p.graph;
  if (!p.compiled.plan)
    throw InternalError("dnnc profile: the compiled graph has no memory plan");
  const ir::MemoryPlan &plan = *p.compiled.plan;
  // Measured: one run with the executor's trace on (first: its binding also holds the dims
  // only a run binds, which the planned sizes after a sync point need).
  std::vector<const Tensor *> none(g.body.args.size(), nullptr);
  ir::Binding b = ir::bindInputs(g, none, binding);
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < g.body.args.size(); ++k)
    inputs.push_back(rt::randomInput(*g.body.args[k], b, o.seed * 7919 + k + 1));
  rt::Executable &exe = *p.compiled.exe;
  exe.setMemoryTracing(true);
  exe.run(inputs, weights.params, binding);
  p.order = plan.order;
  if (p.order.empty()) // (its curves would have no position to show)
    throw DataError(fmt::format("model '{}' runs no op (its outputs are its inputs or constants): there is no memory over "
                                "its ops to profile", g.name));
  std::unordered_map<const ir::Op *, int> position;
  for (int i = 0; i < static_cast<int>(p.order.size()); ++i)
    position.emplace(p.order[i], i);
  int end = static_cast<int>(p.order.size()) - 1;

  // Categories.
  std::unordered_set<const ir::Value *> yields(g.body.yields.begin(), g.body.yields.end());
  std::unordered_set<const ir::Value *> optimizerInputs, trainedParams;
  for (size_t k = 0; k < g.body.args.size(); ++k) {
    bool state = step && k >= step->modelInputs + step->scalars.size() + (step->rng ? 1 : 0);
    p.categoryOf[g.body.args[k]] = state ? kState : kInputs;
    if (step && k >= step->modelInputs)
      optimizerInputs.insert(g.body.args[k]);
  }
  for (const ir::Op *op : g.body.ops)
    if (op->kind == ir::OpKind::Param) {
      p.categoryOf[op->results[0]] = kParams;
      if (step && std::count(step->params.begin(), step->params.end(), op->get<std::string>("name")))
        trainedParams.insert(op->results[0]);
    }
  if (const auto &r = p.compiled.recompute) {
    for (const ir::StashDecision &d : r->decisions)
      if (!d.recomputed)
        p.categoryOf[d.value] = kStashed;
    for (const ir::Value *v : r->recomputedValues)
      p.categoryOf[v] = kRecomputed;
  }
  if (step && !g.body.yields.empty() && g.body.yields[0]->def && position.count(g.body.yields[0]->def))
    p.forwardEnd = position.at(g.body.yields[0]->def);
  // Gradients: backward values of a trained param's type that the update reads.
  std::unordered_map<const ir::Value *, std::vector<const ir::Op *>> readers;
  for (const ir::Op *op : p.order)
    forEachRead(*op, [&](const ir::Value *v) { readers[v].push_back(op); });
  auto isGradient = [&](const ir::Value *v) {
    if (!step || !v->def || !position.count(v->def) || position.at(v->def) <= p.forwardEnd)
      return false;
    bool paramType = std::any_of(trainedParams.begin(), trainedParams.end(), [&](const ir::Value *w) { return w->type.str() == v->type.str(); });
    if (!paramType)
      return false;
    for (const ir::Op *reader : readers[v])
      for (const ir::Value *x : reader->operands)
        if (trainedParams.count(x) || optimizerInputs.count(x))
          return true;
    return false;
  };
  // A gradient that is a sum of pieces (a param used twice, or sliced per layer) is made
  // by ops that read the partial sums: those are gradients too.
  std::unordered_set<const ir::Value *> gradients;
  for (int i = end; i >= 0 && step; --i) {
    const ir::Op *op = p.order[i];
    bool makes = false;
    for (const ir::Value *r : op->results)
      makes = makes || gradients.count(r) || isGradient(r);
    if (!makes)
      continue;
    for (const ir::Value *r : op->results)
      gradients.insert(r);
    for (const ir::Value *x : op->operands)
      if (x->def && position.count(x->def) && position.at(x->def) > p.forwardEnd &&
          std::any_of(trainedParams.begin(), trainedParams.end(), [&](const ir::Value *w) { return w->type.str() == x->type.str(); }))
        gradients.insert(x);
  }
  auto categorize = [&](const ir::Value *v) {
    if (yields.count(v))
      return kOutputs;
    if (auto it = p.categoryOf.find(v); it != p.categoryOf.end())
      return it->second;
    return gradients.count(v) ? kGradients : kWorkspace;
  };
  auto bytesOf = [&](const ir::Value *v) {
    std::optional<int64_t> n = sym::evaluate(v->type.bytes(), exe.binding());
    return n.value_or(0); // a loop-variant size (inside a while): the measured account has it
  };

  // Rows: whole-step values, planned buffers, then what the runtime allocates as it goes.
  std::unordered_set<const ir::Value *> seen;
  auto add = [&](const ir::Value *v, int first, int last) {
    if (!seen.insert(v).second)
      return;
    p.rows.push_back(Row{v, categorize(v), bytesOf(v), first, last});
    p.categoryOf[v] = p.rows.back().category;
  };
  for (const ir::Value *a : g.body.args)
    add(a, 0, end);
  for (const ir::Op *op : g.body.ops)
    if (op->kind == ir::OpKind::Param)
      add(op->results[0], 0, end);
  std::unordered_set<const ir::Value *> kept; // prepacked weights: in the arena from one call to the next
  for (const ir::PlannedBuffer &b : plan.buffers)
    if (b.kept) {
      kept.insert(b.value);
      p.categoryOf[b.value] = kParams;
      add(b.value, 0, end);
    } else {
      add(b.value, b.inPlace ? b.first + 1 : b.first, b.last);
    }
  // Where a read keeps a value: the reader's position, a loop op's whole span (its entry
  // copies the value and it is held through the loop), and the end of every loop around
  // the reader but not around the value's definition (its body reads it again).
  auto isLoop = [](const ir::Op &op) { return op.kind == ir::OpKind::For || op.kind == ir::OpKind::While; };
  const ir::OpSpans spans(g.body); // the plan's order, with each op's span and loop
  auto span = [&](const ir::Op *op) { return isLoop(*op) ? spans.end(op) : position.at(op); };
  auto useEnd = [&](const ir::Value *v, const ir::Op *user) { return std::max(span(user), spans.loopUseEnd(v->def, user)); };
  std::unordered_map<const ir::Value *, int> lastRead;
  for (int i = 0; i <= end; ++i)
    forEachRead(*p.order[i], [&](const ir::Value *v) { lastRead[v] = std::max(lastRead[v], useEnd(v, p.order[i])); });
  // A loop's step copies its body's yields after the body's last op: they are read there.
  for (const ir::Op *op : p.order)
    if (isLoop(*op))
      for (const auto &r : op->regions)
        if (!r->ops.empty())
          for (const ir::Value *y : r->yields)
            lastRead[y] = std::max(lastRead[y], span(r->ops.back()));
  // Every other result is the runtime's to allocate as it goes (the plan's `unplanned`, host
  // ops' results, and a loop's results: the buffers its carried values are copied into, live
  // through its body), except a param view's, which is the param's own memory. (An if's
  // results are its regions' yields: no memory of their own in the plan.)
  for (const ir::Op *op : p.order)
    if (op->kind != ir::OpKind::Param && !rt::isParamView(*op) && op->kind != ir::OpKind::If)
      for (const ir::Value *r : op->results)
        add(r, position.at(op), yields.count(r) ? end : std::max(span(op), lastRead.count(r) ? lastRead.at(r) : 0));

  p.planned.assign(p.order.size(), {});
  for (const Row &r : p.rows)
    for (int t = r.first; t <= r.last; ++t)
      p.planned[t][r.category] += r.bytes;
  p.plannedPeak = peakOf(p.planned);

  const rt::Executable::MemoryTrace &trace = exe.memoryTrace();
  p.arenaPlanned = sym::evaluate(plan.arena, exe.binding()).value_or(0);
  p.arenaAllocated = exe.arenaBytes();
  p.arenaHighWater = trace.arenaHighWater;
  p.allocated = trace.allocatedBytes;
  std::array<int64_t, kCategories> always{};
  for (size_t k = 0; k < inputs.size(); ++k)
    always[p.categoryOf.at(g.body.args[k])] += static_cast<int64_t>(inputs[k].byteSize());
  for (const auto &[name, t] : weights.params)
    always[kParams] += static_cast<int64_t>(t.byteSize());
  // Each result's memory (an instance): live from the op that wrote it until the last op
  // that read those bytes (or, for an output, to the end). Reads are followed by address,
  // so a result written over an operand read for the last time replaces it (in place).
  // A loop's carried values are one instance each per run of the loop, made at its entry,
  // written over after each step (Executable.h, the memory trace) and read by value: as
  // the loop's results or its regions' carried arguments, whose memory in the walk is a
  // copy no event makes (nor is an if's result or a loop counter followed by address:
  // freed copies' addresses come back). What a loop's entry reads is held to its last
  // step, as the plan holds a loop's operands. Events map to op positions; the curve keeps
  // each position's largest.
  struct Instance {
    Category category;
    int64_t bytes;
    size_t start, end;
  };
  std::vector<Instance> instances;
  std::unordered_map<const uint8_t *, size_t> at; // the latest instance at each address
  std::unordered_set<size_t> whole;                 // instances alive through the call (prepacked weights)
  std::unordered_map<const ir::Value *, const ir::Value *> carriedAs; // a loop region's carried argument -> the loop's result
  for (const ir::Op *op : p.order)
    if (isLoop(*op))
      for (const auto &r : op->regions)
        for (size_t k = 0; k < op->results.size() && op->results.size() <= r->args.size(); ++k)
          carriedAs[r->args[r->args.size() - op->results.size() + k]] = op->results[k];
  std::unordered_set<const ir::Value *> modelArgs(g.body.args.begin(), g.body.args.end());
  std::unordered_map<const ir::Value *, size_t> carried;          // a loop's result -> its buffer's instance, this run's
  std::unordered_map<const ir::Op *, std::vector<size_t>> held;  // what a loop's entry read, this run
  const auto &events = trace.events;
  for (size_t i = 0; i < events.size(); ++i) {
    const auto &e = events[i];
    std::vector<size_t> read;
    for (size_t k = 0; k < e.reads.size(); ++k) {
      const ir::Value *v = e.reads[k];
      if (auto c = carriedAs.find(v); c != carriedAs.end())
        v = c->second;
      // The walk's own copies (a loop's or an if's results, region arguments): never by address.
      bool copy = v->def ? isLoop(*v->def) || v->def->kind == ir::OpKind::If : !modelArgs.count(v);
      size_t hit = instances.size();
      if (auto c = carried.find(v); c != carried.end())
        hit = c->second;
      else if (!copy && k < e.readData.size())
        if (auto it = at.find(e.readData[k]); it != at.end())
          hit = it->second;
      if (hit < instances.size()) {
        // A step's copies read the yields at the end of the body, its last op's event.
        instances[hit].end = std::max(instances[hit].end, e.loopStep && i > 0 ? i - 1 : i); // an output's runs to the end
        read.push_back(hit);
      }
    }
    if (isLoop(*e.op)) {
      if (e.loopStep) { // the same buffers written over: no new memory
        for (const auto &m : e.made)
          if (auto c = carried.find(m.value); c != carried.end()) {
            instances[c->second].end = std::max(instances[c->second].end, i);
            instances[c->second].bytes = std::max(instances[c->second].bytes, m.bytes); // a while's carried value may grow
          }
        for (size_t h : held[e.op])
          instances[h].end = std::max(instances[h].end, i);
        continue;
      }
      held[e.op] = read;
    }
    for (const auto &m : e.made) {
      if (isLoop(*e.op)) { // a carried buffer, new at the entry; followed by value
        carried.erase(m.value); // an earlier run's
        if (m.bytes == 0)
          continue;
        carried[m.value] = instances.size();
        auto cat = p.categoryOf.count(m.value) ? p.categoryOf.at(m.value) : categorize(m.value);
        instances.push_back(Instance{cat, m.bytes, i, yields.count(m.value) ? events.size() : i});
        continue;
      }
      if (m.where == rt::Executable::Placement::View || m.bytes == 0)
        continue;
      size_t start = i;
      if (auto it = at.find(m.data); it != at.end() && instances[it->second].end >= i)
        start = i + 1; // written over an operand read here for the last time
      auto cat = p.categoryOf.count(m.value) ? p.categoryOf.at(m.value) : categorize(m.value);
      bool keptHere = kept.count(m.value) != 0; // packed by an earlier call or this one, it stays for the next
      if (keptHere)
        whole.insert(instances.size()), start = 0;
      at[m.data] = instances.size();
      instances.push_back(Instance{cat, m.bytes, start, yields.count(m.value) || keptHere ? events.size() : i});
    }
  }
  std::vector<std::array<int64_t, kCategories>> perEvent(events.size(), always);
  for (const Instance &in : instances)
    for (size_t t = in.start; t <= std::min(in.end, events.size() - 1); ++t)
      perEvent[t][in.category] += in.bytes;
  // Before the first op that makes anything: what lives through the whole call.
  for (size_t k : whole)
    always[instances[k].category] += instances[k].bytes;
  p.measured.assign(p.order.size(), always);
  std::vector<bool> hit(p.order.size(), false);
  for (size_t i = 0; i < events.size(); ++i)
    if (auto it = position.find(events[i].op); it != position.end()) {
      // A position run more than once (a loop body) shows its largest.
      auto &slot = p.measured[it->second];
      if (!hit[it->second] || total(perEvent[i]) > total(slot))
        slot = perEvent[i];
      hit[it->second] = true;
    }
  for (size_t t = 1; t < p.order.size(); ++t) // ops that make nothing (params, control flow) keep what was live
    if (!hit[t])
      p.measured[t] = p.measured[t - 1];
  p.measuredPeak = peakOf(p.measured);
  return p;
}

std::string opText(const ir::Graph &g, const std::vector<const ir::Op *> &order, int t) {
  const ir::Op &op = *order[t];
  std::string where = ir::sourceLine(g, op.loc);
  return fmt::format("{}{}", ir::opInfo(op.kind).spelling, where.empty() ? "" : ", " + where);
}



// The chart: stacked bands of `p`'s planned bytes per category over its op positions,
// its measured total, its peak; `baseline` (recompute none) as a second curve.
std::string svgOf(const Profiled &p, const Profiled *baseline, const std::string &title) {
  const double W = 960, H = 480, left = 80, right = 190, top = 40, bottom = 50;
  const double plotW = W - left - right, plotH = H - top - bottom;
  size_t n = p.order.size();
  size_t nMax = std::max(n, baseline ? baseline->order.size() : 0);
  int64_t most = total(p.planned[p.plannedPeak]);
  most = std::max(most, total(p.measured[p.measuredPeak]));
  if (baseline)
    most = std::max(most, total(baseline->planned[baseline->plannedPeak]));
  most = std::max<int64_t>(most, 1);
  auto x = [&](double t) { return left + plotW * t / static_cast<double>(std::max<size_t>(nMax - 1, 1)); };
  auto y = [&](double bytes) { return top + plotH * (1 - bytes / static_cast<double>(most) / 1.05); };
  std::ostringstream s;
  s << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\">\n",
                   W, H, W, H);
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n", left, xmlText(title));
  if (p.forwardEnd >= 0) {
    s << fmt::format("<rect class=\"phase\" data-phase=\"forward\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#e8f0fb\"/>\n", x(0), top,
                     x(p.forwardEnd + 0.5) - x(0), plotH);
    s << fmt::format("<rect class=\"phase\" data-phase=\"backward\" x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#fbefe4\"/>\n",
                     x(p.forwardEnd + 0.5), top, x(static_cast<double>(n - 1)) - x(p.forwardEnd + 0.5), plotH);
    s << fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"#555\">forward</text>\n", x(0) + 4, top + 14);
    s << fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"#555\">backward</text>\n", x(p.forwardEnd + 0.5) + 4, top + 14);
  }
  // Bands, bottom up: each category's polygon between the running sums below and above it.
  std::vector<int64_t> below(n, 0);
  for (int c = 0; c < kCategories; ++c) {
    std::vector<int64_t> above = below;
    for (size_t t = 0; t < n; ++t)
      above[t] += p.planned[t][c];
    std::string points;
    for (size_t t = 0; t < n; ++t)
      points += fmt::format("{:.1f},{:.1f} ", x(static_cast<double>(t)), y(static_cast<double>(above[t])));
    for (size_t t = n; t-- > 0;)
      points += fmt::format("{:.1f},{:.1f} ", x(static_cast<double>(t)), y(static_cast<double>(below[t])));
    s << fmt::format("<polygon class=\"band\" data-category=\"{}\" fill=\"{}\" fill-opacity=\"0.85\" points=\"{}\"/>\n", kKeys[c], kColours[c], points);
    below = above;
  }
  auto curve = [&](const std::vector<std::array<int64_t, kCategories>> &c, const std::string &cls, const std::string &attrs) {
    std::string d;
    for (size_t t = 0; t < c.size(); ++t)
      d += fmt::format("{}{:.1f},{:.1f} ", t ? "L" : "M", x(static_cast<double>(t)), y(static_cast<double>(total(c[t]))));
    s << fmt::format("<path class=\"{}\" {} fill=\"none\" d=\"{}\"/>\n", cls, attrs, d);
  };
  std::string mode = ir::recomputeModeName(p.compiled.recompute ? p.compiled.recompute->mode : ir::RecomputeMode::None);
  curve(p.planned, "curve", fmt::format("data-recompute=\"{}\" data-kind=\"planned\" stroke=\"#222\" stroke-width=\"1.5\"", mode));
  curve(p.measured, "curve", fmt::format("data-recompute=\"{}\" data-kind=\"measured\" stroke=\"#d62728\" stroke-width=\"1\" stroke-dasharray=\"2,2\"", mode));
  if (baseline)
    curve(baseline->planned, "curve", "data-recompute=\"none\" data-kind=\"planned\" stroke=\"#000\" stroke-width=\"2\" stroke-dasharray=\"6,4\"");
  auto peak = [&](const Profiled &q, const std::string &label) {
    double px = x(q.plannedPeak), py = y(static_cast<double>(total(q.planned[q.plannedPeak])));
    s << fmt::format("<g class=\"peak\" data-recompute=\"{}\"><line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#000\" stroke-dasharray=\"3,3\"/>"
                     "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#000\"/><text x=\"{:.1f}\" y=\"{:.1f}\">{}</text></g>\n",
                     label, px, top + plotH, px, py, px, py, px + 6, py - 6,
                     xmlText(fmt::format("peak ({}) {} at op {}", label, sizeText(total(q.planned[q.plannedPeak])), q.plannedPeak)));
  };
  peak(p, mode);
  if (baseline)
    peak(*baseline, "none");
  // Axes and their labels.
  s << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#000\"/>\n", left, top + plotH, left + plotW, top + plotH);
  s << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#000\"/>\n", left, top, left, top + plotH);
  for (int k = 0; k <= 4; ++k) {
    double bytes = static_cast<double>(most) * 1.05 * k / 4;
    s << fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", left - 6, y(bytes) + 4, sizeText(static_cast<int64_t>(bytes)));
    double t = static_cast<double>(nMax - 1) * k / 4;
    s << fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x(t), top + plotH + 16, static_cast<int64_t>(t));
  }
  s << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">op index (the plan's order)</text>\n", left + plotW / 2, H - 10);
  s << fmt::format("<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">bytes live</text>\n", top + plotH / 2,
                   top + plotH / 2);
  // Legend.
  double ly = top;
  for (int c = 0; c < kCategories; ++c, ly += 18)
    s << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n", W - right + 12, ly, kColours[c],
                     W - right + 30, ly + 10, kNames[c]);
  s << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#222\" stroke-width=\"1.5\"/><text x=\"{}\" y=\"{}\">planned ({})</text>\n",
                   W - right + 12, ly + 6, W - right + 26, ly + 6, W - right + 30, ly + 10, mode);
  ly += 18;
  s << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#d62728\" stroke-dasharray=\"2,2\"/><text x=\"{}\" y=\"{}\">measured ({})</text>\n",
                   W - right + 12, ly + 6, W - right + 26, ly + 6, W - right + 30, ly + 10, mode);
  if (baseline) {
    ly += 18;
    s << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#000\" stroke-width=\"2\" stroke-dasharray=\"6,4\"/><text x=\"{}\" y=\"{}\">planned (none)</text>\n",
                     W - right + 12, ly + 6, W - right + 26, ly + 6, W - right + 30, ly + 10);
  }
  s << "</svg>\n";
  return s.str();
}

} // namespace

int profileMemory(Program &prog, const ProfileOptions &o) {
  std::string err;
  ModelInfo *m = selectModel(prog, o.model, err);
  if (!m) {
    std::cerr << "dnnc: error: " << err << "\n";
    return kUserError;
  }
  if (std::string e = checkBinding(*m, o.binding); !e.empty()) {
    std::cerr << "dnnc: error: --bind: " << e << "\n";
    return kUserError;
  }
  const ir::Graph &g = *m->graph;
  // One binding: every dim the inputs name (derived dims follow from them).
  std::vector<std::string> unbound;
  for (const ir::Value *a : g.body.args)
    for (sym::ExprRef d : a->type.dims)
      for (const std::string &name : sym::freeVars(d))
        if (!o.binding.count(name) && std::find(unbound.begin(), unbound.end(), name) == unbound.end())
          unbound.push_back(name);
  if (!unbound.empty()) {
    std::string example;
    for (const std::string &n : unbound)
      example += (example.empty() ? "" : ",") + n + "=8";
    std::cerr << fmt::format("dnnc: error: dnnc profile measures one binding: bind {} {} of model '{}' (e.g. --bind {})\n",
                             unbound.size() == 1 ? "dim" : "dims", fmt::join(unbound, ", "), m->name, example);
    return kUserError;
  }
  // A chart that cannot be written is known before anything compiles or runs.
  if (!o.svg.empty()) {
    std::filesystem::path folder = std::filesystem::path(o.svg).parent_path();
    std::error_code ec;
    if (!folder.empty() && !std::filesystem::is_directory(folder, ec)) {
      std::cerr << fmt::format("dnnc: error: --svg {}: there is no folder '{}' to write it in\n", o.svg, folder.string());
      return kUserError;
    }
    if (!writesNoInput("--svg", o.svg))
      return kUsage;
  }
  ir::RecomputeMode mode = o.compile.passes.recompute.mode;
  try {
    Profiled p = profileOnce(g, o, mode, o.binding);
    std::optional<Profiled> baseline;
    if (!o.svg.empty() && o.train && mode == ir::RecomputeMode::Auto)
      baseline = profileOnce(g, o, ir::RecomputeMode::None, o.binding);
    const ir::Graph &pg = *p.graph;
    std::string bound;
    for (const auto &[name, v] : p.compiled.exe->binding())
      bound += fmt::format("{}{} = {}", bound.empty() ? "" : ", ", name, v);
    std::string what = o.train ? fmt::format("training step ({}, recompute {}{})", o.optimizerName, ir::recomputeModeName(mode),
                                             p.versions > 1 ? fmt::format(", version {} of {} at this binding", p.version + 1, p.versions) : "")
                               : "call";
    const auto &atPeak = p.planned[p.plannedPeak];
    const auto &measuredAtPeak = p.measured[p.measuredPeak];
    std::vector<const Row *> sorted;
    for (const Row &r : p.rows)
      sorted.push_back(&r);
    std::stable_sort(sorted.begin(), sorted.end(), [](const Row *a, const Row *b) { return a->bytes > b->bytes; });
    if (o.json) {
      // ordered_json: the categories in the spec's order.
      using Json = nlohmann::ordered_json;
      auto categories = [](const std::array<int64_t, kCategories> &at) {
        Json c = Json::object();
        for (int k = 0; k < kCategories; ++k)
          c[kKeys[k]] = at[k];
        return c;
      };
      auto curve = [](const std::vector<std::array<int64_t, kCategories>> &c) {
        Json totals = Json::array();
        for (const auto &at : c)
          totals.push_back(total(at));
        return totals;
      };
      Json values = Json::array();
      for (const Row *r : sorted)
        values.push_back(Json{{"name", valueName(r->value)}, {"line", ir::sourceLine(pg, r->value->loc)},
                              {"type", r->value->type.str(&p.compiled.exe->binding())}, {"bytes", r->bytes},
                              {"category", kKeys[r->category]}});
      Json out{{"peak_bytes", total(atPeak)},
               {"peak_op", opText(pg, p.order, p.plannedPeak)},
               {"peak_index", p.plannedPeak},
               {"ops", p.order.size()},
               {"categories", categories(atPeak)},
               {"measured",
                {{"peak_bytes", total(measuredAtPeak)},
                 {"peak_op", opText(pg, p.order, p.measuredPeak)},
                 {"peak_index", p.measuredPeak},
                 {"categories", categories(measuredAtPeak)},
                 {"arena_bytes", p.arenaAllocated},
                 {"arena_high_water", p.arenaHighWater},
                 {"allocated_bytes", p.allocated}}},
               {"planned_arena_bytes", p.arenaPlanned},
               {"live", {{"planned", curve(p.planned)}, {"measured", curve(p.measured)}}},
               {"values", values}};
      std::cout << out.dump(1) << "\n";
    } else {
      std::cout << fmt::format("memory of model '{}', one {}{} on {}\n", m->name, what, bound.empty() ? "" : " at " + bound, o.device);
      std::cout << fmt::format("{:<22}{:>14}{:>14}\n", "at the peak", "planned", "measured");
      for (int c = 0; c < kCategories; ++c)
        std::cout << fmt::format("  {:<20}{:>14}{:>14}\n", kNames[c], sizeText(atPeak[c]), sizeText(measuredAtPeak[c]));
      std::cout << fmt::format("  {:<20}{:>14}{:>14}\n", "total", sizeText(total(atPeak)), sizeText(total(measuredAtPeak)));
      std::cout << fmt::format("peak: planned {} bytes at op {} of {} ({}); measured {} bytes at op {} ({})\n", total(atPeak), p.plannedPeak,
                               p.order.size(), opText(pg, p.order, p.plannedPeak), total(measuredAtPeak), p.measuredPeak,
                               opText(pg, p.order, p.measuredPeak));
      if (p.forwardEnd >= 0)
        std::cout << fmt::format("forward: ops 0 to {} (the loss); backward and update: ops {} to {}\n", p.forwardEnd, p.forwardEnd + 1,
                                 p.order.size() - 1);
      std::cout << fmt::format("arena: planned {} bytes, allocated by the runtime {} bytes, written up to {}; allocated outside it: {} bytes\n",
                               p.arenaPlanned, p.arenaAllocated, p.arenaHighWater, p.allocated);
      // The largest values; the rest (scalars, small temporaries) as one line (--json lists all).
      constexpr size_t kShown = 20;
      std::cout << fmt::format("by source line ({} values, largest first):\n", sorted.size());
      int64_t restBytes = 0;
      for (size_t k = kShown; k < sorted.size(); ++k)
        restBytes += sorted[k]->bytes;
      if (sorted.size() > kShown)
        sorted.resize(kShown);
      for (const Row *r : sorted) {
        std::string where = ir::sourceLine(pg, r->value->loc);
        std::cout << fmt::format("  {:<12} {:<14} {:<22} {:>10}  {}\n", where.empty() ? "-" : where, valueName(r->value),
                                 r->value->type.str(&p.compiled.exe->binding()), sizeText(r->bytes), kKeys[r->category]);
      }
      if (p.rows.size() > kShown)
        std::cout << fmt::format("  ... and {} smaller values, {} in all (--json lists every value)\n", p.rows.size() - kShown, sizeText(restBytes));
    }
    if (!o.svg.empty()) {
      std::string title = fmt::format("{}: {} at {}", m->name, what, bound);
      rt::writeFileAtomically(o.svg, svgOf(p, baseline ? &*baseline : nullptr, title));
    }
  } catch (const DataError &e) {
    std::cerr << "dnnc: error: " << e.what() << "\n";
    return kUserError;
  }
  return kOk;
}

} // namespace dnnc::tool
