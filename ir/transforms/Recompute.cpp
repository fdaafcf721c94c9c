// The recompute pass (see Recompute.h).
#include "ir/transforms/Recompute.h"

#include "ir/graph/OpRegistry.h"
#include "ir/graph/Walk.h"
#include "ir/transforms/MemoryPlan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace dnnc::ir {
namespace {

using Binding = std::map<std::string, int64_t>;

// A nominal machine for the time model: only ratios to the whole step matter, so what
// counts is its balance (about 2.5 FLOPs per byte moved, a CPU's or a GPU's order).
constexpr double kFlopsPerNs = 50, kBytesPerNs = 20;
// auto without a budget takes a recomputation whose chain costs under this share of the step.
constexpr double kFreeShare = 0.01;

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

// One op's time at `b`: its FLOPs (the registry's; else one per element of its largest
// operand or result) and the bytes it reads and writes.
double opCost(const Op &op, const Binding &b) {
  double bytes = 0, elements = 0;
  for (const auto *list : {&op.operands, &op.results})
    for (const Value *v : *list) {
      bytes += eval(v->type.bytes(), b);
      elements = std::max(elements, eval(numel(v->type), b));
    }
  sym::ExprRef flops = flopCount(op);
  return (flops ? eval(flops, b) : elements) / kFlopsPerNs + bytes / kBytesPerNs;
}

// The step's time at `b`: every op, a `for` over dims its body times its trips.
double regionCost(const Region &r, const Binding &b) {
  double sum = 0;
  for (const Op *op : r.ops) {
    if (op->regions.empty()) {
      sum += opCost(*op, b);
      continue;
    }
    double body = 0;
    for (const auto &sub : op->regions)
      body += regionCost(*sub, b);
    double trips = 1;
    if (op->kind == OpKind::For && op->has("lo") && op->has("hi"))
      trips = std::max(0.0, eval(op->get<sym::ExprRef>("hi"), b) - eval(op->get<sym::ExprRef>("lo"), b));
    sum += body * trips;
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
  double share = 0;
  double bytes = 0; // at the reference binding
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
    stepCost_[0] = regionCost(g_.body, low_), stepCost_[1] = regionCost(g_.body, reference_);
    std::vector<Candidate> candidates;
    std::unordered_map<const Value *, std::string> blocked;
    for (Span &s : spans_)
      for (const Value *v : s.stashed) {
        Candidate c{v, Kind::Cheap, {}, 0, eval(v->type.bytes(), reference_)};
        std::unordered_set<const Op *> seen;
        if (std::string why = chainOf(s, v, c, seen); !why.empty()) {
          blocked[v] = why;
          continue;
        }
        for (size_t e = 0; e < 2; ++e)
          c.share = std::max(c.share, stepCost_[e] > 0 ? chainCost(s, c.chain, e ? reference_ : low_) / stepCost_[e] : 0.0);
        candidates.push_back(std::move(c));
      }
    std::unordered_set<const Value *> chosen = decide(candidates, report);
    for (Span &s : spans_)
      rewrite(s, chosen);
    for (const Span &s : spans_)
      for (const Value *v : s.stashed) {
        StashDecision d{v, chosen.count(v) != 0, 0, 0, ""};
        auto c = std::find_if(candidates.begin(), candidates.end(), [&](const Candidate &x) { return x.value == v; });
        if (c != candidates.end()) {
          d.chainOps = static_cast<int>(c->chain.size());
          d.costShare = c->share;
          d.why = opInfo(v->def->kind).spelling;
        } else {
          d.why = blocked[v];
        }
        report.decisions.push_back(d);
      }
    return report;
  }

private:
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
  double chainCost(const Span &s, const std::vector<const Op *> &chain, const Binding &b) const {
    std::unordered_set<const Op *> in(chain.begin(), chain.end());
    std::unordered_set<const Value *> loaded;
    double flops = 0, bytes = 0;
    for (const Op *op : chain) {
      sym::ExprRef f = flopCount(*op);
      flops += f ? eval(f, b) : eval(numel(op->results[0]->type), b);
      if (classify(*op, reference_) != Kind::Cheap)
        bytes += eval(op->results[0]->type.bytes(), b);
      for (const Value *v : op->operands)
        if (!(v->def && in.count(v->def)) && !s.stashedSet.count(v) && loaded.insert(v).second)
          bytes += eval(v->type.bytes(), b);
    }
    return flops / kFlopsPerNs + bytes / kBytesPerNs;
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
  void rewrite(Span &s, const std::unordered_set<const Value *> &chosen) {
    std::unordered_map<const Value *, Value *> clones;
    std::vector<Op *> pending;
    std::function<Value *(Value *)> materialize = [&](Value *v) -> Value * {
      if (auto it = clones.find(v); it != clones.end())
        return it->second;
      const Op *op = v->def;
      Op *c = cloneOp(g_, *op, [&](Value *o) { return needsClone(s, o, chosen) ? materialize(o) : o; });
      for (size_t k = 0; k < op->results.size(); ++k)
        clones[op->results[k]] = c->results[k];
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
  double stepCost_[2] = {0, 0};
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

std::optional<int64_t> parseByteSize(const std::string &text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  std::string number = text.substr(0, i), unit = text.substr(i);
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number == ".")
    return std::nullopt;
  const std::map<std::string, double> units{{"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                                            {"TiB", 1099511627776.0}};
  auto u = units.find(unit);
  if (u == units.end())
    return std::nullopt;
  double bytes = std::stod(number) * u->second;
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

RecomputeReport recompute(Graph &g, const std::vector<const Op *> &backwardStarts, const RecomputeOptions &options) {
  return Recompute(g, options).run(backwardStarts);
}

std::string print(const RecomputeReport &report, const Graph &g) {
  size_t n = std::count_if(report.decisions.begin(), report.decisions.end(), [](const StashDecision &d) { return d.recomputed; });
  std::string out = fmt::format("recompute ({}{}): {} stashed values, {} recomputed in the backward pass\n", recomputeModeName(report.mode),
                                report.budget ? fmt::format(", budget {} bytes{}", *report.budget, report.budgetMet ? "" : ", not met") : "",
                                report.decisions.size(), n);
  for (const StashDecision &d : report.decisions) {
    std::string detail = d.recomputed || d.chainOps ? fmt::format("{}, {} op{}, {:.2f}% of the step", d.why, d.chainOps, d.chainOps == 1 ? "" : "s", 100 * d.costShare)
                                                    : d.why;
    out += fmt::format("  {:<10} {} {}  {} bytes  ({}; {})\n", d.recomputed ? "recompute" : "stash", valueName(d.value), d.value->type.str(),
                       d.value->type.bytes()->str(), detail, sourceLine(g, d.value->loc));
  }
  out += fmt::format("  stashed: {} bytes; recomputed: {} bytes\n", report.keptBytes()->str(), report.recomputedBytes()->str());
  return out;
}

} // namespace dnnc::ir
