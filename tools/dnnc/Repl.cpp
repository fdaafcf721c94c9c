// `dnnc repl`: shape queries on a loaded model; nothing runs.
#include "api/Memory.h"
#include "backend/Compile.h"
#include "ir/graph/Serialize.h"
#include "tools/dnnc/Driver.h"
#include "tools/dnnc/Repl.h"

#include <editline/readline.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <iostream>
#include <memory>
#include <sstream>

namespace dnnc::tool {
namespace {

const char *kHelp = R"(commands:
  :load FILE            load a .dnn file
  :model M              focus on model M
  :type NAME            the type of a named value
  EXPR                  the inferred type of an expression (nothing runs)
  :bind B=8 T=128       bind dims (range-checked); types then print with numbers
  :unbind T             remove a binding
  :dims                 each dim: range, binding, where it was introduced
  :class NAME           the shape class of the op behind NAME, and why
  :mem                  the planned arena of intermediates (a formula of the dims, bytes when
                        bound), params/inputs/outputs totals and the largest buffers
  :solve mem <= 16GiB for B
                        the largest B (other dims bound) whose arena fits
  :mem train [adam]     the memory of one training step (dnnc train; sgd, momentum, adam or
                        adamw, default adam) with the recompute setting: params + optimizer
                        state + inputs + the step's outputs (loss, metrics: params and state
                        are updated in place) + its arena (gradients, stashed
                        activations and workspace), each a formula of the dims, and which
                        forward values the backward pass recomputes
  :solve train mem <= 16GiB for B
                        the largest B whose training step (adam) fits
  :set recompute auto|none|all
                        what :mem train and :solve train recompute (as dnnc train --recompute)
  :set budget 8GiB|none the memory budget recompute auto meets (as --memory-budget), at
                        the bound dims (the others at their upper bounds, or 64)
  :help                 this text
  :quit                 leave
)";

} // namespace

class Repl {
public:
  Repl(std::vector<std::string> includes, bool interactive, std::ostream &out, std::ostream &err, ir::PassOptions passes)
      : includes_(std::move(includes)), interactive_(interactive), out_(out), err_(err) {
    compile_.passes = std::move(passes);
  }

  void load(const std::string &file) {
    auto p = std::make_unique<Program>();
    for (const std::string &i : includes_)
      p->addIncludePath(i);
    DiagnosticEngine diags(p->sources());
    bool ok = p->load(file, diags);
    diags.render(err_);
    if (!ok)
      return;
    std::string err;
    ModelInfo *model = selectModel(*p, "", err);
    if (!model) { // the model loaded before stays, as after any failed :load
      err_ << "error: " << err << "\n";
      return;
    }
    program_ = std::move(p);
    binding_.clear();
    model_ = model;
    if (interactive_) // scripted sessions print results only
      out(fmt::format("loaded {} (model {})", file, model_->name));
  }

  // Handles one line; false when the session should end. Bound dims so large that a size
  // no longer fits in 64 bits are the user's to change, not a bug.
  bool handle(const std::string &raw) {
    try {
      return dispatch(raw);
    } catch (const std::overflow_error &e) {
      error(fmt::format("{} under the binding {}: bind smaller values", e.what(), bindingText()));
      return true;
    } catch (const DataError &e) { // the model's compile for :mem (a grad it cannot take)
      error(e.what());
      return true;
    }
  }

private:
  std::string bindingText() const {
    std::string text;
    for (auto &[k, v] : binding_)
      text += (text.empty() ? "" : ", ") + fmt::format("{} = {}", k, v);
    return text.empty() ? "(none)" : text;
  }

  bool dispatch(const std::string &raw) {
    std::string line = trim(raw);
    if (line.empty() || line[0] == '#')
      return true;
    std::istringstream in(line);
    std::string cmd, arg;
    in >> cmd;
    std::getline(in, arg);
    arg = trim(arg);
    if (cmd == ":quit" || cmd == ":q" || cmd == ":exit")
      return false;
    if (cmd == ":help")
      out_ << kHelp;
    else if (cmd == ":load")
      arg.empty() ? error(":load needs a file") : load(arg);
    else if (line[0] != ':')
      typeExpr(line);
    else if (!model_)
      error("no model is loaded; use :load FILE");
    else if (cmd == ":model")
      focus(arg);
    else if ((cmd == ":type" || cmd == ":class") && arg.empty())
      error(fmt::format("usage: {} NAME (a value of model '{}'; an expression alone prints its type)", cmd, model_->name));
    else if (cmd == ":type")
      typeName(arg);
    else if (cmd == ":bind")
      bind(arg);
    else if (cmd == ":unbind")
      unbind(arg);
    else if (cmd == ":dims")
      dims();
    else if (cmd == ":class")
      shapeClass(arg);
    else if (cmd == ":mem" && arg.rfind("train", 0) == 0)
      memTrain(trim(arg.substr(5)));
    else if (cmd == ":mem" && arg.empty())
      mem();
    else if (cmd == ":mem")
      error(fmt::format(":mem takes nothing or 'train [OPTIMIZER]', not '{}'", arg));
    else if (cmd == ":solve" && arg.rfind("train", 0) == 0)
      solveTrain(arg.substr(5));
    else if (cmd == ":solve")
      solve(arg, plan().arena, "the arena");
    else if (cmd == ":set")
      set(arg);
    else
      error(fmt::format("unknown command '{}'; :help lists them", cmd));
    return true;
  }

  static std::string trim(const std::string &s) {
    size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }
  void out(const std::string &s) { out_ << s << "\n" << std::flush; }
  void error(const std::string &s) { err_ << "error: " << s << "\n" << std::flush; }

  const NamedValue *find(const std::string &name) {
    const NamedValue *found = nullptr;
    for (const NamedValue &v : model_->values)
      if (v.name == name)
        found = &v; // the last assignment wins
    if (!found)
      error(fmt::format("model '{}' has no value named '{}'", model_->name, name));
    return found;
  }

  void focus(const std::string &name) {
    if (ModelInfo *m = program_->model(name)) {
      model_ = m;
      binding_.clear();
      out("model " + name);
    } else {
      error(fmt::format("no model named '{}'", name));
    }
  }

  void typeName(const std::string &name) {
    if (const NamedValue *v = find(name))
      out(fmt::format("{}: {}", name, v->type.str(&binding_)));
  }

  void typeExpr(const std::string &text) {
    if (!model_) {
      error("no model is loaded; use :load FILE");
      return;
    }
    DiagnosticEngine diags(program_->sources());
    auto t = program_->typeExpression(*model_, text, diags);
    diags.render(err_);
    if (!t)
      return;
    if (t->tensor) {
      for (size_t k = 0; k < t->tensor->dims.size(); ++k) // a size no run would make
        if (auto v = sym::evaluate(t->tensor->dims[k], binding_); v && *v < 0) {
          error(fmt::format("this would be {}: dim {} is {} = {}, which is negative under the binding", t->tensor->str(), k,
                            t->tensor->dims[k]->str(), *v));
          return;
        }
      out(t->tensor->str(&binding_));
    }
    else if (t->dim)
      out(fmt::format("dim {}", ir::dimText(*t->dim, &binding_)));
    else
      out(t->text);
  }

  void bind(const std::string &arg) {
    Binding b = binding_;
    std::string err = parseBinding(arg, b);
    if (err.empty())
      err = checkBinding(*model_, b);
    if (!err.empty())
      return error(err);
    binding_ = b;
    out("bound " + bindingText());
  }

  void unbind(const std::string &arg) {
    std::istringstream in(arg);
    std::string name;
    while (in >> name)
      if (!binding_.erase(name))
        error(fmt::format("'{}' is not bound", name));
  }

  void dims() {
    for (const DimInfo &d : model_->dims) {
      sym::Interval r = model_->analyzer.range(d.name);
      std::string range = fmt::format("{}..{}", r.lo, r.hi >= sym::Interval::kInf ? std::string("inf") : std::to_string(r.hi));
      auto it = binding_.find(d.name);
      std::string bound = it == binding_.end() ? "unbound" : fmt::format("= {}", it->second);
      std::string where = d.loc.valid() ? fmt::format("{}:{}:{}", program_->sources().path(d.loc.begin.file),
                                                      d.loc.begin.line, d.loc.begin.col)
                                        : "";
      out(fmt::format("{}  in {}  {}  {} {}", d.name, range, bound, d.origin, where));
    }
  }

  void shapeClass(const std::string &name) {
    if (const NamedValue *v = find(name))
      out(fmt::format("{}: {} ({}): {}", name, ir::shapeClassName(v->shapeClass), v->op, ir::shapeClassMeaning(v->shapeClass)));
  }

  // The model's memory plan as `dnnc run` makes it: on a fused copy of the graph (the
  // REPL keeps the model as written), made once per model.
  const ir::MemoryPlan &plan() {
    auto it = plans_.find(model_);
    if (it == plans_.end()) {
      it = plans_.emplace(model_, api::planMemory(*model_->graph, compile_)).first;
    }
    return it->second.plan;
  }

  // A training step's memory (`:mem train`), made from a copy of the model as `dnnc train`
  // makes it (ir/transforms/TrainStep.h; params change every step, so nothing prepacks),
  // once per model and optimizer.
  struct TrainMemory {
    std::unique_ptr<ir::Graph> graph;
    ir::MemoryPlan plan;
    ir::TrainStep step;
    size_t paramCount = 0;
    sym::ExprRef params, trained, state, inputs, outputs, total;
    ir::RecomputeReport recompute;
  };
  // The step of recompute version `version` by shape (ir/transforms/Recompute.h).
  const TrainMemory *trainMemory(const std::string &optimizer, size_t version = 0) {
    // A budget is checked at the bound dims: the plan is then the binding's.
    compile_.passes.recompute.budgetAt = compile_.passes.recompute.budget ? binding_ : Binding{};
    auto key = std::make_pair(model_, optimizer + (compile_.passes.recompute.budget ? " at " + bindingText() : "") +
                                          (version ? fmt::format(" version {}", version) : ""));
    auto it = trainPlans_.find(key);
    if (it != trainPlans_.end())
      return &it->second;
    std::optional<ir::Optimizer> opt = ir::parseOptimizer(optimizer);
    if (!opt) {
      error(ir::unknownOptimizer(optimizer));
      return nullptr;
    }
    TrainMemory t;
    t.graph = ir::cloneGraph(*model_->graph);
    try {
      t.step = ir::makeTrainStep(*t.graph, *opt);
    } catch (const DataError &e) {
      error(e.what());
      return nullptr;
    }
    ir::Region &body = t.graph->body;
    std::vector<const ir::Value *> params, trained, state, inputs;
    for (const ir::Op *op : body.ops)
      if (op->kind == ir::OpKind::Param) {
        params.push_back(op->results[0]);
        if (std::count(t.step.params.begin(), t.step.params.end(), op->get<std::string>("name")))
          trained.push_back(op->results[0]);
      }
    t.paramCount = params.size();
    for (size_t k = 0; k < body.args.size(); ++k) // the optimizer's scalars (lr, ...) count as inputs
      (k < t.step.modelInputs + t.step.scalars.size() ? inputs : state).push_back(body.args[k]);
    t.params = api::totalBytes(params), t.trained = api::totalBytes(trained), t.inputs = api::totalBytes(inputs);
    t.state = api::totalBytes(state);
    backend::CompileOptions options = compile_;
    options.constantParams = false;
    options.passes.recompute.version = version;
    backend::Lowered lowered = backend::lowerFor(*t.graph, *backend::findTarget("cpu"), options);
    t.plan = std::move(*lowered.plan);
    // The updated params and state are written over the old ones (the plan's in-place
    // outputs): only the loss, the metrics and any update that could not be made safe
    // take memory of their own.
    t.outputs = t.plan.outputBytes;
    if (lowered.recompute)
      t.recompute = std::move(*lowered.recompute);
    // Not through the analyzer: its simplify is exponential in a training step's nest of
    // max(...) (an unrolled 4-step LSTM took minutes); sym::add already folds the sums.
    t.total = sym::add(sym::add(sym::add(t.params, t.state), sym::add(t.inputs, t.outputs)), t.plan.arena);
    return &trainPlans_.emplace(key, std::move(t)).first->second;
  }

  // The step of the version by shape that `binding` runs (the first while a dim the
  // decisions read is unbound).
  const TrainMemory *trainMemoryAt(const std::string &optimizer, const Binding &binding) {
    const TrainMemory *t = trainMemory(optimizer);
    if (!t || t->recompute.versions.size() < 2)
      return t;
    for (const auto &[dim, value] : t->recompute.versions[0].firstAt)
      if (!binding.count(dim))
        return t;
    std::vector<sym::ExprRef> arenas{t->plan.arena};
    for (size_t v = 1; v < t->recompute.versions.size(); ++v)
      if (const TrainMemory *other = trainMemory(optimizer, v))
        arenas.push_back(other->plan.arena);
    size_t version = t->recompute.versionAt(binding, arenas);
    return version ? trainMemory(optimizer, version) : t;
  }

  void memTrain(const std::string &optimizer) {
    const TrainMemory *t = trainMemoryAt(optimizer.empty() ? "adam" : optimizer, binding_);
    if (!t)
      return;
    // As bytesText, but with nothing bound the formula prints as sym::add built it (see
    // trainMemory on the analyzer).
    auto bytesText = [&](sym::ExprRef e) { return binding_.empty() ? e->str() : this->bytesText(e); };
    std::string states = fmt::format("{}", fmt::join(t->step.stateNames, ", "));
    const ir::RecomputeReport &r = t->recompute;
    std::string version = r.versions.size() < 2 ? "" : fmt::format(", version {} of {} by shape", r.version + 1, r.versions.size());
    out(fmt::format("training step ({}, recompute {}{}{}): {} bytes", optimizer.empty() ? "adam" : optimizer,
                    ir::recomputeModeName(compile_.passes.recompute.mode),
                    compile_.passes.recompute.budget ? fmt::format(", budget {} bytes", *compile_.passes.recompute.budget) : "", version,
                    bytesText(t->total)));
    out(fmt::format("  params: {} bytes ({} tensors, {} trained)", bytesText(t->params), t->paramCount, t->step.params.size()));
    out(fmt::format("  optimizer state: {} bytes ({})", bytesText(t->state), states.empty() ? "none" : states));
    out(fmt::format("  inputs (and the optimizer's scalars): {} bytes; the step's outputs (loss and metrics): {} bytes", bytesText(t->inputs),
                    bytesText(t->outputs)));
    out(fmt::format("  updated in place: {} of {} params and state tensors (no second copy)", t->plan.inPlaceOutputs.size(),
                    t->step.params.size() * (1 + t->step.statesPerParam)));
    out(fmt::format("  arena: {} bytes, planned over the forward and backward passes; in it:", bytesText(t->plan.arena)));
    out(fmt::format("    gradients: {} bytes", bytesText(t->trained)));
    size_t recomputed = 0;
    for (const ir::StashDecision &d : t->recompute.decisions)
      recomputed += d.recomputed;
    out(fmt::format("    stashed activations: {} bytes ({} forward values the backward pass reads, kept until it does)",
                    bytesText(t->recompute.keptBytes()), t->recompute.decisions.size() - recomputed));
    out(fmt::format("    recomputed in the backward pass instead: {} bytes ({} values)", bytesText(t->recompute.recomputedBytes()),
                    recomputed));
    if (!t->recompute.budgetMet)
      out(fmt::format("  the budget is not met: nothing more can be recomputed"));
    if (r.versions.size() > 1)
    {
      std::string versions = ir::printVersions(r);
      versions.pop_back(); // its last newline: out adds one
      out(versions + (r.version == 0 && !sym::evaluate(t->plan.arena, binding_) ? "\n  (bind every dim for the version a binding runs)" : ""));
    }
    if (sym::evaluate(t->plan.arena, binding_))
      out(fmt::format("  most live at once: {} bytes (the arena's lower bound)", t->plan.liveLowerBound(binding_)));
  }

  // `:set recompute auto|none|all`, `:set budget 8GiB|none`: the training step's
  // recompute options (the flags' meaning); training plans made before are stale.
  void set(const std::string &arg) {
    std::istringstream in(arg);
    std::string what, value, extra;
    in >> what >> value >> extra;
    ir::RecomputeOptions &r = compile_.passes.recompute;
    if (what == "recompute" && !value.empty() && extra.empty()) {
      std::optional<ir::RecomputeMode> mode = ir::parseRecomputeMode(value);
      if (!mode)
        return error(ir::badRecomputeMode(value));
      r.mode = *mode;
    } else if (what == "budget" && !value.empty() && extra.empty()) {
      std::optional<int64_t> bytes = value == "none" ? std::optional<int64_t>() : ir::parseByteSize(value);
      if (value != "none" && !bytes)
        return error(ir::badMemoryBudget(value));
      r.budget = bytes;
    } else {
      return error(fmt::format("usage: :set recompute auto|none|all, or :set budget SIZE|none (e.g. :set budget 8GiB), not ':set {}'", arg));
    }
    trainPlans_.clear();
    out(fmt::format("recompute {}{}", ir::recomputeModeName(r.mode), r.budget ? fmt::format(", budget {} bytes", *r.budget) : ""));
  }

  void solveTrain(const std::string &text) {
    if (const TrainMemory *t = trainMemory("adam")) {
      size_t recomputed = 0;
      for (const ir::StashDecision &d : t->recompute.decisions)
        recomputed += d.recomputed;
      out(fmt::format("training step (adam, recompute {}: {} of {} stashed values recomputed{})", ir::recomputeModeName(t->recompute.mode),
                      recomputed, t->recompute.decisions.size(),
                      t->recompute.versions.size() > 1 ? fmt::format(" in version 1, {} versions by shape", t->recompute.versions.size()) : ""));
      // Each candidate value is sized by the version it runs.
      solve(text, t->total, "the training step", [&](const Binding &b) -> std::optional<int64_t> {
        const TrainMemory *at = trainMemoryAt("adam", b);
        return at ? sym::evaluate(at->total, b) : std::nullopt;
      });
    }
  }

  // An expression under the binding: a number when every dim is bound.
  std::string bytesText(sym::ExprRef e) const { return api::bytesText(e, binding_, model_->analyzer); }

  void mem() {
    const ir::MemoryPlan &p = plan();
    const ir::Graph &g = *model_->graph;
    api::MemorySummary s = api::summarizeMemory(g, p);
    out(fmt::format("arena: {} bytes", bytesText(s.arena)));
    if (s.lateArena)
      out(fmt::format("arena after sync points: {} bytes (sized when its EDO dims are known)", bytesText(s.lateArena)));
    out(fmt::format("params: {} bytes ({} tensors); inputs: {} bytes; outputs: {} bytes", bytesText(s.params), s.paramCount,
                    bytesText(s.inputs), bytesText(s.outputs)));
    if (sym::evaluate(p.arena, binding_)) // the yardsticks, once every dim is bound
      out(fmt::format("naive sum of intermediates: {} bytes; most live at once: {} bytes", p.naiveBytes(binding_),
                      p.liveLowerBound(binding_)));
    // Largest first at the binding, unbound dims at their reference sizes.
    std::map<std::string, int64_t> at = binding_, reference = ir::referenceBinding(g);
    at.insert(reference.begin(), reference.end());
    std::vector<const ir::PlannedBuffer *> largest;
    for (const ir::PlannedBuffer &b : p.buffers)
      largest.push_back(&b);
    // (A size past 64 bits evaluates to nothing: it is the largest, not 0.)
    auto bytesAt = [&](const ir::PlannedBuffer *b) { return sym::evaluate(b->bytes, at).value_or(INT64_MAX); };
    std::stable_sort(largest.begin(), largest.end(), [&](auto *x, auto *y) { return bytesAt(x) > bytesAt(y); });
    out(fmt::format("largest buffers ({} planned):", p.buffers.size()));
    for (size_t k = 0; k < largest.size() && k < 5; ++k) {
      const ir::Value *v = largest[k]->value;
      out(fmt::format("  {} bytes  {} {}  ({})", bytesText(largest[k]->bytes), v->name.empty() ? fmt::format("%{}", v->id) : v->name,
                      v->type.str(&binding_), ir::sourceLine(g, v->loc)));
    }
    if (!p.unplanned.empty())
      out(fmt::format("not planned: {} buffers whose sizes are known only while the model runs", p.unplanned.size()));
  }

  // `:solve mem <= 16GiB for B`, read by hand: SIZE is a decimal number (a fraction or
  // an exponent allowed), the unit optional.
  struct SolveQuery {
    std::string number, unit, dim;
  };
  static std::optional<SolveQuery> parseSolve(const std::string &s) {
    size_t i = 0;
    auto space = [&] {
      size_t b = i;
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
        ++i;
      return i > b;
    };
    auto lit = [&](const std::string &w) {
      if (s.compare(i, w.size(), w) != 0)
        return false;
      i += w.size();
      return true;
    };
    auto digits = [&] {
      size_t b = i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])))
        ++i;
      return i > b;
    };
    auto word = [&] {
      size_t b = i;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_'))
        ++i;
      return s.substr(b, i - b);
    };
    SolveQuery q;
    space();
    if (!lit("mem"))
      return std::nullopt;
    space();
    if (!lit("<="))
      return std::nullopt;
    space();
    size_t begin = i;
    if (!digits())
      return std::nullopt;
    if (lit(".") && !digits())
      return std::nullopt;
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (!lit("+"))
        lit("-");
      if (!digits())
        return std::nullopt;
    }
    q.number = s.substr(begin, i - begin);
    size_t afterNumber = i;
    space();
    std::string unit = word();
    if (!unit.empty() && ir::byteUnit(unit))
      q.unit = unit;
    else
      i = afterNumber; // no unit: bytes
    if (!space() || !lit("for") || !space())
      return std::nullopt;
    if (i >= s.size() || std::isdigit(static_cast<unsigned char>(s[i])))
      return std::nullopt;
    q.dim = word();
    space();
    if (q.dim.empty() || i != s.size())
      return std::nullopt;
    return q;
  }

  // `bytes` (the arena, or a training step's total) grows with every dim, so a binary
  // search over the dim's range finds the largest value that fits. Bytes beyond 64 bits
  // exceed every limit.
  // The largest value of the dim whose `bytes` fit; `bytesAt`, when given, sizes a binding
  // instead (a training step's versions by shape).
  void solve(const std::string &text, sym::ExprRef bytes, const std::string &what,
             const std::function<std::optional<int64_t>(const Binding &)> &bytesAt = nullptr) {
    auto q = parseSolve(text);
    if (!q) {
      error("usage: :solve [train] mem <= SIZE[B|KiB|MiB|GiB|TiB] for DIM, e.g. :solve mem <= 16GiB for B");
      return;
    }
    double limit = std::strtod(q->number.c_str(), nullptr) * *ir::byteUnit(q->unit);
    if (!std::isfinite(limit)) {
      error(fmt::format("the size {}{}{} is too large: it is not a finite number of bytes",
                        q->number.size() > 40 ? q->number.substr(0, 40) + "..." : q->number, q->unit.empty() ? "" : " ", q->unit));
      return;
    }
    const std::string &dim = q->dim;
    auto rangeIt = model_->graph->dimRanges.find(dim);
    if (rangeIt == model_->graph->dimRanges.end()) {
      error(fmt::format("model '{}' has no dim '{}'", model_->name, dim));
      return;
    }
    api::SolveResult r;
    try {
      r = api::solveLargest(bytes, dim, rangeIt->second, binding_, limit, bytesAt);
    } catch (const DataError &e) {
      error(e.what());
      return;
    }
    auto needs = [](std::optional<int64_t> bytes) {
      return bytes ? fmt::format("{} bytes", *bytes) : std::string("more than 2^63 - 1 bytes");
    };
    if (r.kind == api::SolveResult::Unbound)
      error(fmt::format("{} also depends on {}: bind it first (:bind {}=...)", what, r.unbound, r.unbound));
    else if (r.kind == api::SolveResult::None)
      out(fmt::format("no value of {} fits: {} = {} already needs {}", dim, dim, r.value, needs(r.bytes)));
    else if (r.kind == api::SolveResult::Any)
      out(fmt::format("any value of {} fits: {} = {} needs {}", dim, dim, r.value, needs(r.bytes)));
    else if (r.stoppedByOverflow) // the budget was not what stopped the search
      out(fmt::format("{} = {} (at {} = {} {} needs more than 2^63 - 1 bytes, which dnnc does not size)", dim, r.value, dim,
                      r.value + 1, what));
    else
      out(fmt::format("{} = {}", dim, r.value));
  }

  std::vector<std::string> includes_;
  backend::CompileOptions compile_; // how :mem's plan is made
  std::map<const ModelInfo *, api::PlannedMemory> plans_;
  std::map<std::pair<const ModelInfo *, std::string>, TrainMemory> trainPlans_;
  bool interactive_;
  std::unique_ptr<Program> program_;
  ModelInfo *model_ = nullptr;
  Binding binding_;
  std::ostream &out_, &err_;
};

ReplSession::ReplSession(std::vector<std::string> includes, bool interactive, std::ostream &out, std::ostream &err,
                         ir::PassOptions passes)
    : impl_(std::make_unique<Repl>(std::move(includes), interactive, out, err, std::move(passes))) {}
ReplSession::~ReplSession() = default;
void ReplSession::load(const std::string &file) { impl_->load(file); }
bool ReplSession::handle(const std::string &line) { return impl_->handle(line); }

int runRepl(const std::string &file, const std::vector<std::string> &includes, const ir::PassOptions &passes) {
  bool interactive = isatty(STDIN_FILENO);
  ReplSession repl(includes, interactive, std::cout, std::cerr, passes);
  if (!file.empty())
    repl.load(file);
  std::string history;
  if (interactive) {
    if (const char *home = std::getenv("HOME"))
      history = std::string(home) + "/.dnnc_history";
    using_history();
    if (!history.empty())
      read_history(history.c_str());
    while (char *line = readline("dnnc> ")) {
      std::unique_ptr<char, decltype(&free)> owned(line, &free);
      if (*line)
        add_history(line);
      if (!repl.handle(line))
        break;
    }
    if (!history.empty())
      write_history(history.c_str());
    return kOk;
  }
  std::string line;
  while (std::getline(std::cin, line))
    if (!repl.handle(line))
      break;
  return kOk;
}

} // namespace dnnc::tool
