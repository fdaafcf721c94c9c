// The recompute pass (see Recompute.h).
#include "ir/transforms/Recompute.h"

#include "ir/graph/OpRegistry.h"
#include "ir/graph/Walk.h"
#include "ir/transforms/MemoryPlan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace dnnc::ir {
namespace {

using Binding = std::map<std::string, int64_t>;

// A nominal machine for the time model: only ratios to the whole step matter, so what
// counts is its balance (50 FLOPs and 20 bytes per ns, about 2.5 FLOPs per byte moved, a
// CPU's or a GPU's order). Costs are dim polynomials in hundredths of a nanosecond.
constexpr int64_t kCostPerFlop = 2, kCostPerByte = 5;
// auto without a budget takes a recomputation whose chain costs under this share of the step.
constexpr double kFreeShare = 0.01;
// By shape: a value holding at least this share of what the rule above leaves stashed,
// largest first, while all such chains together cost under kWorthShare of the step.
constexpr double kLargeStash = 0.25, kWorthShare = 0.05;

double eval(sym::ExprRef e, const Binding &b) {
  if (!e)
    return 0;
  std::optional<int64_t> v = sym::evaluate(e, b);
  return v ? static_cast<double>(*v) : 0;
}

sym::ExprRef numel(const TensorType &t) {
  sym::ExprRef n = sym::constant(1);
  for (sym::ExprRef d : t.dims)
    n = sym::mul(n, d);
  return n;
}

sym::ExprRef timeCost(sym::ExprRef flops, sym::ExprRef bytes) {
  return sym::add(sym::mul(sym::constant(kCostPerFlop), flops), sym::mul(sym::constant(kCostPerByte), bytes));
}

// One op's time: its FLOPs (the registry's; else one per element of its largest operand
// or result) and the bytes it reads and writes.
sym::ExprRef opCost(const Op &op) {
  sym::ExprRef bytes = sym::constant(0), elements = sym::constant(0);
  for (const auto *list : {&op.operands, &op.results})
    for (const Value *v : *list) {
      bytes = sym::add(bytes, v->type.bytes());
      elements = sym::max(elements, numel(v->type));
    }
  sym::ExprRef flops = flopCount(op);
  return timeCost(flops ? flops : elements, bytes);
}

// The step's time: every op, a `for` over dims its body times its trips.
sym::ExprRef regionCost(const Region &r) {
  sym::ExprRef sum = sym::constant(0);
  for (const Op *op : r.ops) {
    if (op->regions.empty()) {
      sum = sym::add(sum, opCost(*op));
      continue;
    }
    sym::ExprRef body = sym::constant(0);
    for (const auto &sub : op->regions)
      body = sym::add(body, regionCost(*sub));
    if (op->kind == OpKind::For && op->has("lo") && op->has("hi"))
      body = sym::mul(body, sym::max(sym::constant(0), sym::sub(op->get<sym::ExprRef>("hi"), op->get<sym::ExprRef>("lo"))));
    sum = sym::add(sum, body);
  }
  return sum;
}

// Each dim at the low end of its range (at least 1, so that nothing is empty).
Binding lowBinding(const Graph &g) {
  Binding out;
  for (const auto &[name, r] : g.dimRanges)
    out[name] = std::max<int64_t>(r.first, 1);
  return out;
}

// How an op may be recomputed.
enum class Kind { Cheap, Expanding, Gemm, Never };

Kind classify(const Op &op, const Binding &reference) {
  const OpInfo &info = opInfo(op.kind);
  // dim_value, a host op, only reads the binding: as cheap as a constant.
  if (op.kind == OpKind::DimValue)
    return Kind::Cheap;
  if (!op.regions.empty() || op.kind == OpKind::Param || op.kind == OpKind::Dropout || info.placement == Placement::Host ||
      op.shapeClass == ShapeClass::EDO || op.kind == OpKind::Grad)
    return Kind::Never;
  if (op.kind == OpKind::Matmul || op.kind == OpKind::Conv2d) {
    double in = 0;
    for (const Value *v : op.operands)
      in += eval(numel(v->type), reference);
    return eval(numel(op.results[0]->type), reference) > in ? Kind::Expanding : Kind::Gemm;
  }
  // As cheap: a fill or constant (no operands), split (q, k, v from one projection), the
  // gathers (a layer's slice of stacked params, a backward loop's row of its stash, an
  // embedding) and one_hot (labels), whose indices are alive where the clone runs.
  if (isElementwise(op.kind) || isReduction(op.kind) || isInjective(op) || info.has(OpFlag::Fill) || op.operands.empty() ||
      op.kind == OpKind::Split || op.kind == OpKind::Index || op.kind == OpKind::Take || op.kind == OpKind::Embedding ||
      op.kind == OpKind::OneHot)
    return Kind::Cheap;
  return Kind::Never;
}

// forEachRead (ir/graph/Walk.h), by reference: to replace what the op reads.
void replaceReads(Op &op, const std::function<void(Value *&)> &f) {
  for (Value *&v : op.operands)
    f(v);
  for (auto &sub : op.regions)
    walkRegions(*sub, [&](Region &r) {
      for (Op *inner : r.ops)
        for (Value *&v : inner->operands)
          f(v);
      for (Value *&v : r.yields)
        f(v);
    });
}

Op *cloneOp(Graph &g, const Op &op, const std::function<Value *(Value *)> &operand) {
  Op *c = g.newOp(op.kind, op.loc);
  c->attrs = op.attrs;
  c->shapeClass = op.shapeClass;
  for (Value *v : op.operands)
    c->operands.push_back(operand(v));
  for (const Value *r : op.results) {
    Value *nr = g.newValue(r->type, r->name, r->loc);
    nr->def = c;
    c->results.push_back(nr);
  }
  return c;
}

std::string valueName(const Value *v) { return v->name.empty() ? fmt::format("%{}", v->id) : v->name; }

// One region with a backward span: its forward ops (before `start`) and what they stash.
struct Span {
  Region *region;
  size_t start;
  std::unordered_set<const Op *> forward;
  std::vector<const Value *> stashed; // forward order
  std::unordered_set<const Value *> stashedSet;

  bool isForward(const Value *v) const { return v->def && forward.count(v->def); }
  // Alive in the backward pass without being stashed here: not made by the forward, or a param.
  bool alive(const Value *v) const { return !isForward(v) || v->def->kind == OpKind::Param; }
};

struct Candidate {
  const Value *value;
  Kind kind;                     // the costliest kind of op in its chain
  std::vector<const Op *> chain; // its op and the unstashed forward ops it needs, inputs first
  sym::ExprRef cost;             // the chain's time
  double share = 0;              // its share of the step's, the larger of the two ends
  double bytes = 0;              // at the reference binding
};

class Recompute {
public:
  Recompute(Graph &g, const RecomputeOptions &options) : g_(g), options_(options), reference_(referenceBinding(g)), low_(lowBinding(g)) {}

  RecomputeReport run(const std::vector<const Op *> &starts) {
    RecomputeReport report;
    report.mode = options_.mode;
    report.budget = options_.budget;
    std::unordered_set<const Op *> startSet(starts.begin(), starts.end());
    walkRegions(g_.body, [&](Region &r) {
      for (size_t i = 0; i < r.ops.size(); ++i)
        if (startSet.count(r.ops[i])) {
          spans_.push_back(makeSpan(r, i));
          break;
        }
    });
    if (spans_.empty())
      return report;
    report.stepCost = regionCost(g_.body);
    double stepCost[2] = {eval(report.stepCost, low_), eval(report.stepCost, reference_)};
    std::vector<Candidate> candidates;
    std::unordered_map<const Value *, std::string> blocked;
    for (Span &s : spans_)
      for (const Value *v : s.stashed) {
        Candidate c{v, Kind::Cheap, {}, nullptr, 0, eval(v->type.bytes(), reference_)};
        std::unordered_set<const Op *> seen;
        if (std::string why = chainOf(s, v, c, seen); !why.empty()) {
          blocked[v] = why;
          continue;
        }
        c.cost = chainCost(s, c.chain);
        for (size_t e = 0; e < 2; ++e)
          c.share = std::max(c.share, stepCost[e] > 0 ? eval(c.cost, e ? reference_ : low_) / stepCost[e] : 0.0);
        candidates.push_back(std::move(c));
      }
    std::unordered_set<const Value *> chosen = decide(candidates, report);
    for (const Span &s : spans_)
      for (const Value *v : s.stashed) {
        StashDecision d{v, chosen.count(v) != 0, 0, 0, "", false, nullptr};
        auto c = std::find_if(candidates.begin(), candidates.end(), [&](const Candidate &x) { return x.value == v; });
        if (c != candidates.end()) {
          d.chainOps = static_cast<int>(c->chain.size());
          d.costShare = c->share;
          d.why = opInfo(v->def->kind).spelling;
          d.chainCost = c->cost;
          d.byShape = options_.mode == RecomputeMode::Auto && !options_.budget && !d.recomputed && c->kind != Kind::Gemm;
        } else {
          d.why = blocked[v];
        }
        report.decisions.push_back(d);
      }
    if (options_.mode == RecomputeMode::Auto && !options_.budget)
      chooseVersion(report, chosen);
    for (Span &s : spans_)
      rewrite(s, chosen, report.recomputedValues);
    return report;
  }

private:
  // The versions by shape over a grid of bindings (RecomputeReport::decideAt), and the
  // one options.version names added to `chosen`.
  void chooseVersion(RecomputeReport &report, std::unordered_set<const Value *> &chosen) const {
    report.versions.push_back({std::vector<bool>(report.decisions.size(), false), low_}); // the rule above alone
    for (const Binding &b : bindingGrid()) {
      std::vector<bool> at = report.decideAt(b);
      bool known = std::any_of(report.versions.begin(), report.versions.end(), [&](const RecomputeVersion &v) { return v.recomputed == at; });
      if (!known && report.versions.size() < kMaxRecomputeVersions)
        report.versions.push_back({at, b});
    }
    if (options_.version >= report.versions.size())
      throw std::invalid_argument(fmt::format("recompute: version {} of {}", options_.version, report.versions.size()));
    report.version = options_.version;
    const std::vector<bool> &take = report.versions[report.version].recomputed;
    for (size_t k = 0; k < take.size(); ++k)
      if (take[k]) {
        report.decisions[k].recomputed = true;
        chosen.insert(report.decisions[k].value);
      }
  }

  // Each dim from a 64th of its reference value (at least its low end: smaller shapes
  // stash too little for the choice to matter, and their constant terms would make
  // versions of no use), the powers of two above it and its reference value; every
  // combination when there are at most 256, else one dim at a time with the others at
  // their reference values.
  std::vector<Binding> bindingGrid() const {
    std::map<std::string, std::vector<int64_t>> points;
    size_t combinations = 1;
    for (const auto &[name, hi] : reference_) {
      int64_t lo = std::max(low_.count(name) ? low_.at(name) : std::min<int64_t>(1, hi), hi / 64);
      std::vector<int64_t> &p = points[name];
      p.push_back(lo);
      for (int64_t v = 1; v < hi; v *= 2)
        if (v > lo)
          p.push_back(v);
      if (hi > lo)
        p.push_back(hi);
      combinations *= p.size();
    }
    std::vector<Binding> grid{Binding{}};
    if (combinations <= 256) {
      for (const auto &[name, values] : points) {
        std::vector<Binding> next;
        for (const Binding &b : grid)
          for (int64_t v : values) {
            next.push_back(b);
            next.back()[name] = v;
          }
        grid = std::move(next);
      }
      return grid;
    }
    grid.clear();
    for (const auto &[name, values] : points)
      for (int64_t v : values) {
        grid.push_back(reference_);
        grid.back()[name] = v;
      }
    return grid;
  }

  Span makeSpan(Region &r, size_t start) {
    Span s{&r, start, {}, {}, {}};
    s.forward.insert(r.ops.begin(), r.ops.begin() + static_cast<long>(start));
    for (size_t i = start; i < r.ops.size(); ++i)
      forEachRead(*r.ops[i], [&](const Value *v) {
        if (!s.alive(v) && s.stashedSet.insert(v).second)
          s.stashed.push_back(v);
      });
    std::unordered_map<const Op *, size_t> position;
    for (size_t i = 0; i < start; ++i)
      position[r.ops[i]] = i;
    std::stable_sort(s.stashed.begin(), s.stashed.end(), [&](const Value *a, const Value *b) { return position[a->def] < position[b->def]; });
    return s;
  }

  // A chain's time when it runs fused into its backward reader (which is where the
  // rewrite puts it): its FLOPs, the bytes of its inputs that the backward pass does not
  // read anyway (a stashed input is loaded by its backward readers already), and the
  // result of a matmul or convolution, which no fusion keeps out of memory.
  sym::ExprRef chainCost(const Span &s, const std::vector<const Op *> &chain) const {
    std::unordered_set<const Op *> in(chain.begin(), chain.end());
    std::unordered_set<const Value *> loaded;
    sym::ExprRef flops = sym::constant(0), bytes = sym::constant(0);
    for (const Op *op : chain) {
      sym::ExprRef f = flopCount(*op);
      flops = sym::add(flops, f ? f : numel(op->results[0]->type));
      if (classify(*op, reference_) != Kind::Cheap)
        bytes = sym::add(bytes, op->results[0]->type.bytes());
      for (const Value *v : op->operands)
        if (!(v->def && in.count(v->def)) && !s.stashedSet.count(v) && loaded.insert(v).second)
          bytes = sym::add(bytes, v->type.bytes());
    }
    return timeCost(flops, bytes);
  }

  // The ops that recompute `v` from values alive in the backward pass; "" or why not.
  std::string chainOf(const Span &s, const Value *v, Candidate &c, std::unordered_set<const Op *> &seen) {
    const Op *op = v->def;
    if (seen.count(op))
      return "";
    Kind k = classify(*op, reference_);
    if (k == Kind::Never)
      return fmt::format("{} is not recomputed", opInfo(op->kind).spelling);
    c.kind = std::max(c.kind, k);
    seen.insert(op);
    for (const Value *o : op->operands)
      if (!s.alive(o) && !s.stashedSet.count(o))
        if (std::string why = chainOf(s, o, c, seen); !why.empty()) // the first value in the way, and why
          return why.rfind("needs ", 0) == 0 ? why : fmt::format("needs {}, which is not kept: {}", valueName(o), why);
    c.chain.push_back(op);
    return "";
  }

  std::unordered_set<const Value *> decide(std::vector<Candidate> &candidates, RecomputeReport &report) {
    std::unordered_set<const Value *> chosen;
    if (options_.mode == RecomputeMode::None)
      return chosen;
    for (const Candidate &c : candidates)
      if (c.kind != Kind::Gemm && (options_.mode == RecomputeMode::All || c.share < kFreeShare))
        chosen.insert(c.value);
    if (!options_.budget)
      return chosen;
    // With a budget: the rest, cheapest per byte saved first, GEMMs only after the others.
    Binding at = options_.budgetAt;
    at.insert(reference_.begin(), reference_.end());
    auto estimate = [&] {
      double bytes = 0;
      for (const Value *a : g_.body.args)
        bytes += eval(a->type.bytes(), at);
      for (const Op *op : g_.body.ops)
        if (op->kind == OpKind::Param)
          bytes += 2 * eval(op->results[0]->type.bytes(), at); // and its gradient
      for (const Span &s : spans_)
        for (const Value *v : s.stashed)
          if (!chosen.count(v))
            bytes += eval(v->type.bytes(), at);
      return bytes;
    };
    std::vector<const Candidate *> rest;
    for (const Candidate &c : candidates)
      if (!chosen.count(c.value) && c.bytes > 0)
        rest.push_back(&c);
    std::stable_sort(rest.begin(), rest.end(), [](const Candidate *a, const Candidate *b) {
      if ((a->kind == Kind::Gemm) != (b->kind == Kind::Gemm))
        return b->kind == Kind::Gemm;
      return a->share / a->bytes < b->share / b->bytes;
    });
    for (const Candidate *c : rest) {
      if (estimate() <= static_cast<double>(*options_.budget))
        break;
      chosen.insert(c->value);
    }
    report.budgetMet = estimate() <= static_cast<double>(*options_.budget);
    return chosen;
  }

  // Clones each chosen value's chain right before its first backward reader; every
  // backward read of it then reads the clone.
  void rewrite(Span &s, const std::unordered_set<const Value *> &chosen, std::vector<const Value *> &made) {
    std::unordered_map<const Value *, Value *> clones;
    std::vector<Op *> pending;
    std::function<Value *(Value *)> materialize = [&](Value *v) -> Value * {
      if (auto it = clones.find(v); it != clones.end())
        return it->second;
      const Op *op = v->def;
      Op *c = cloneOp(g_, *op, [&](Value *o) { return needsClone(s, o, chosen) ? materialize(o) : o; });
      for (size_t k = 0; k < op->results.size(); ++k)
        clones[op->results[k]] = c->results[k];
      made.insert(made.end(), c->results.begin(), c->results.end());
      pending.push_back(c);
      return clones.at(v);
    };
    std::vector<Op *> ops(s.region->ops.begin(), s.region->ops.begin() + static_cast<long>(s.start));
    for (size_t i = s.start; i < s.region->ops.size(); ++i) {
      Op *op = s.region->ops[i];
      replaceReads(*op, [&](Value *&v) { // this span's values only (a nested span's are inside op)
        if (chosen.count(v) && s.stashedSet.count(v))
          v = materialize(v);
      });
      ops.insert(ops.end(), pending.begin(), pending.end());
      pending.clear();
      ops.push_back(op);
    }
    s.region->ops = std::move(ops);
  }

  // An operand of a recomputed op that is recomputed too: a chosen value, or a forward
  // value nobody stashes.
  static bool needsClone(const Span &s, const Value *o, const std::unordered_set<const Value *> &chosen) {
    return !s.alive(o) && (chosen.count(o) || !s.stashedSet.count(o));
  }

  Graph &g_;
  RecomputeOptions options_;
  Binding reference_, low_;
  std::vector<Span> spans_;
};

} // namespace

std::optional<RecomputeMode> parseRecomputeMode(const std::string &text) {
  if (text == "none")
    return RecomputeMode::None;
  if (text == "auto")
    return RecomputeMode::Auto;
  if (text == "all")
    return RecomputeMode::All;
  return std::nullopt;
}

const char *recomputeModeName(RecomputeMode mode) {
  switch (mode) {
  case RecomputeMode::None: return "none";
  case RecomputeMode::All: return "all";
  default: return "auto";
  }
}

std::optional<double> byteUnit(const std::string &unit) {
  const std::map<std::string, double> units{{"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                            {"TiB", 1099511627776.0}};
  auto u = units.find(unit);
  return u == units.end() ? std::nullopt : std::optional<double>(u->second);
}

std::optional<int64_t> parseByteSize(const std::string &text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  std::string number = text.substr(0, i), unit = text.substr(i);
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number == ".")
    return std::nullopt;
  std::optional<double> factor = byteUnit(unit);
  if (!factor)
    return std::nullopt;
  double bytes = std::stod(number) * *factor;
  if (!(bytes >= 1) || bytes > 9.0e18)
    return std::nullopt;
  return static_cast<int64_t>(bytes);
}

std::string badRecomputeMode(const std::string &text) {
  return fmt::format("unknown recompute mode '{}' (modes: none, auto, all)", text);
}

std::string badMemoryBudget(const std::string &text) {
  return fmt::format("'{}' is not a memory size: give a positive number of bytes with an optional unit, e.g. 8GiB or 512MiB "
                     "(units: B, KiB, MiB, GiB, TiB)",
                     text);
}

sym::ExprRef RecomputeReport::keptBytes() const {
  sym::ExprRef sum = sym::constant(0);
  for (const StashDecision &d : decisions)
    if (!d.recomputed)
      sum = sym::add(sum, d.value->type.bytes());
  return sum;
}

sym::ExprRef RecomputeReport::recomputedBytes() const {
  sym::ExprRef sum = sym::constant(0);
  for (const StashDecision &d : decisions)
    if (d.recomputed)
      sum = sym::add(sum, d.value->type.bytes());
  return sum;
}

std::vector<bool> RecomputeReport::decideAt(const std::map<std::string, int64_t> &binding) const {
  std::vector<bool> out(decisions.size(), false);
  double step = eval(stepCost, binding), stashed = 0, spent = 0;
  std::vector<std::pair<double, size_t>> largest; // bytes, decision
  for (size_t k = 0; k < decisions.size(); ++k) {
    const StashDecision &d = decisions[k];
    double bytes = eval(d.value->type.bytes(), binding);
    if (d.byShape || !d.recomputed) // what the binding-independent rule leaves stashed
      stashed += bytes;
    if (d.byShape)
      largest.emplace_back(bytes, k);
  }
  // Largest first, while the step's budget for them lasts.
  std::stable_sort(largest.begin(), largest.end(), [](const auto &a, const auto &b) { return a.first > b.first; });
  for (auto [bytes, k] : largest) {
    double cost = eval(decisions[k].chainCost, binding);
    if (bytes > 0 && bytes >= kLargeStash * stashed && spent + cost < kWorthShare * step) {
      out[k] = true;
      spent += cost;
    }
  }
  return out;
}

size_t RecomputeReport::versionAt(const std::map<std::string, int64_t> &binding, const std::vector<sym::ExprRef> &arenas) const {
  if (versions.size() < 2)
    return 0;
  std::vector<bool> at = decideAt(binding);
  auto differ = [&](size_t v) {
    size_t n = 0;
    for (size_t k = 0; k < at.size(); ++k)
      n += at[k] != versions[v].recomputed[k];
    return n;
  };
  auto bytes = [&](size_t v) -> std::optional<int64_t> {
    return v < arenas.size() && arenas[v] ? sym::evaluate(arenas[v], binding) : std::nullopt;
  };
  // The smaller planned arena wins where it is smaller by more than 1%; a smaller saving
  // does not pay for recomputation the rule at this binding would not do, so there the
  // version closest to the rule's decisions wins.
  // ((b - a) * 100 > b, without its overflow at the sizes :solve tries, up to 2^62)
  auto clearlySmaller = [](int64_t a, int64_t b) { return a < b && b - a > b / 100; };
  size_t best = 0;
  for (size_t v = 1; v < versions.size(); ++v) {
    std::optional<int64_t> a = bytes(v), b = bytes(best);
    bool decided = a && b && (clearlySmaller(*a, *b) || clearlySmaller(*b, *a));
    if (decided ? *a < *b : differ(v) < differ(best))
      best = v;
  }
  return best;
}

RecomputeReport recompute(Graph &g, const std::vector<const Op *> &backwardStarts, const RecomputeOptions &options) {
  return Recompute(g, options).run(backwardStarts);
}

std::string printVersions(const RecomputeReport &report) {
  std::string out = fmt::format("  {} versions by shape (this is version {}; the memory plan picks a binding's):\n", report.versions.size(),
                                report.version + 1);
  for (size_t v = 0; v < report.versions.size(); ++v) {
    std::vector<std::string> at, names;
    for (const auto &[dim, value] : report.versions[v].firstAt)
      at.push_back(fmt::format("{}={}", dim, value));
    for (size_t k = 0; k < report.decisions.size(); ++k)
      if (report.versions[v].recomputed[k])
        names.push_back(valueName(report.decisions[k].value));
    out += names.empty() ? fmt::format("    version {}: only what every shape recomputes\n", v + 1)
                         : fmt::format("    version {} (from {}): also recomputes {}\n", v + 1, fmt::join(at, ", "), fmt::join(names, ", "));
  }
  return out;
}

std::string print(const RecomputeReport &report, const Graph &g) {
  // Whether some version recomputes the value and another does not.
  auto differsByVersion = [&](const StashDecision &d) {
    size_t k = static_cast<size_t>(&d - report.decisions.data()), n = 0;
    for (const RecomputeVersion &v : report.versions)
      n += v.recomputed[k];
    return n > 0 && n < report.versions.size();
  };
  size_t n = std::count_if(report.decisions.begin(), report.decisions.end(), [](const StashDecision &d) { return d.recomputed; });
  std::string out = fmt::format("recompute ({}{}): {} stashed values, {} recomputed in the backward pass\n", recomputeModeName(report.mode),
                                report.budget ? fmt::format(", budget {} bytes{}", *report.budget, report.budgetMet ? "" : ", not met") : "",
                                report.decisions.size(), n);
  for (const StashDecision &d : report.decisions) {
    std::string detail = d.recomputed || d.chainOps ? fmt::format("{}, {} op{}, {:.2f}% of the step", d.why, d.chainOps, d.chainOps == 1 ? "" : "s", 100 * d.costShare)
                                                    : d.why;
    out += fmt::format("  {:<10} {} {}  {} bytes  ({}{}; {})\n", d.recomputed ? "recompute" : "stash", valueName(d.value), d.value->type.str(),
                       d.value->type.bytes()->str(), detail, differsByVersion(d) ? ", by shape" : "", sourceLine(g, d.value->loc));
  }
  if (report.versions.size() > 1)
    out += printVersions(report);
  out += fmt::format("  stashed: {} bytes; recomputed: {} bytes\n", report.keptBytes()->str(), report.recomputedBytes()->str());
  return out;
}

} // namespace dnnc::ir
