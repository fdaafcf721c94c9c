// Static memory planning over symbolic sizes (see MemoryPlan.h for the contract).
#include "ir/transforms/MemoryPlan.h"

#include "ir/graph/Updates.h"

#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace dnnc::ir {

const PlannedBuffer *MemoryPlan::find(const Value *v) const {
  for (const PlannedBuffer &b : buffers)
    if (b.value == v)
      return &b;
  return nullptr;
}

int64_t MemoryPlan::naiveBytes(const std::map<std::string, int64_t> &binding) const {
  int64_t sum = 0;
  for (const PlannedBuffer &b : buffers)
    if (__builtin_add_overflow(sum, sym::evaluate(b.bytes, binding).value_or(0), &sum))
      throw std::overflow_error("the sum of the buffers' bytes overflows 64 bits");
  return sum;
}

int64_t MemoryPlan::liveLowerBound(const std::map<std::string, int64_t> &binding) const {
  int64_t best = 0;
  for (int t = 0; t < static_cast<int>(order.size()); ++t) {
    int64_t live = 0;
    for (const PlannedBuffer &b : buffers)
      if (b.first <= t && t <= b.last && !b.inPlace)
        if (__builtin_add_overflow(live, sym::evaluate(b.bytes, binding).value_or(0), &live))
          throw std::overflow_error("the bytes live at once overflow 64 bits");
    best = std::max(best, live);
  }
  return best;
}

std::map<std::string, int64_t> referenceBinding(const Graph &g) {
  std::map<std::string, int64_t> out;
  for (const auto &[name, r] : g.dimRanges)
    out[name] = r.second < sym::Interval::kInf ? r.second : kUnboundedDim;
  return out;
}

sym::Analyzer analyzerFor(const Graph &g) {
  sym::Analyzer a;
  for (const auto &[name, r] : g.dimRanges)
    a.declare(name, r.first, r.second);
  return a;
}

OpSpans::OpSpans(const Region &body) { number(body, nullptr); }

void OpSpans::number(const Region &r, const Op *loop) {
  for (const Op *op : r.ops) {
    Span s;
    s.begin = static_cast<int>(order_.size());
    order_.push_back(op);
    s.loop = loop;
    bool isLoop = op->kind == OpKind::For || op->kind == OpKind::While;
    if (op->kind != OpKind::Fused) // a fused op is one kernel: one step
      for (const auto &sub : op->regions)
        number(*sub, isLoop ? op : loop);
    s.end = static_cast<int>(order_.size()) - 1;
    spans_[op] = s;
  }
}

int OpSpans::loopUseEnd(const Op *def, const Op *user) const {
  std::set<const Op *> defLoops;
  for (const Op *l = def ? spans_.at(def).loop : nullptr; l; l = spans_.at(l).loop)
    defLoops.insert(l);
  int end = -1;
  for (const Op *l = spans_.at(user).loop; l; l = spans_.at(l).loop)
    if (!defLoops.count(l))
      end = std::max(end, spans_.at(l).end);
  return end;
}

namespace {

class Planner {
public:
  Planner(const Graph &g, const std::function<bool(const Op &)> &producesBuffer)
      : g_(g), produces_(producesBuffer), analyzer_(analyzerFor(g)), reference_(referenceBinding(g)) {
    for (const Value *a : g.body.args)
      for (sym::ExprRef d : a->type.dims)
        for (const std::string &n : sym::freeVars(d))
          inputDims_.insert(n);
  }

  MemoryPlan run() {
    plan_.order = spans_.order();
    for (const Value *y : g_.body.yields)
      outputs_.insert(y);
    collect(g_.body);
    plan_.arena = place(false);
    if (std::any_of(plan_.buffers.begin(), plan_.buffers.end(), [](const PlannedBuffer &b) { return b.late; }))
      plan_.lateArena = place(true);
    return std::move(plan_);
  }

private:
  // Where a use by `user` keeps a value defined by `def` alive until: the user's span,
  // or the end of the outermost loop that holds the user but not the definition.
  int useEnd(const Op *def, const Op *user) const { return std::max(spans_.end(user), spans_.loopUseEnd(def, user)); }

  bool knownAtStart(sym::ExprRef e) const {
    for (const std::string &n : sym::freeVars(e))
      if (!inputDims_.count(n))
        return false;
    return true;
  }

  int64_t atReference(sym::ExprRef e) const { return sym::evaluate(e, reference_).value_or(0); }

  // Candidates: kernel results in plannable regions (the body and `for` bodies).
  void collect(const Region &r) {
    std::set<const Value *> yields(r.yields.begin(), r.yields.end());
    for (const Op *op : r.ops) {
      if (op->kind == OpKind::For)
        for (const auto &sub : op->regions)
          collect(*sub);
      bool plannable = produces_(*op);
      for (const Value *v : op->results) {
        if (outputs_.count(v))
          continue;
        sym::ExprRef bytes = analyzer_.simplify(v->type.bytes());
        // Sizes known only after a sync point (EDO dims) of the body go to the late arena,
        // sized when the first of them is made; inside loops such dims change per iteration.
        bool late = !knownAtStart(bytes);
        if (!plannable || (late && &r != &g_.body)) {
          if (plannable)
            plan_.unplanned.push_back(v);
          continue;
        }
        PlannedBuffer b;
        b.value = v;
        b.bytes = bytes;
        b.late = late;
        b.first = b.last = spans_.begin(op);
        if (yields.count(v)) // a loop body's yield feeds the next iteration
          b.last = held_[v] = lastOfRegion(r);
        b.kept = op->kind == OpKind::Prepack && &r == &g_.body && !late;
        if (b.kept)
          b.first = 0, b.last = lastOfRegion(g_.body);
        plan_.buffers.push_back(b);
        index_[v] = plan_.buffers.size() - 1;
      }
    }
    // Uses: operands of every op in this region and anything nested in it (a fused op's
    // region reads only its own arguments).
    std::function<void(const Region &)> uses = [&](const Region &sub) {
      for (const Op *op : sub.ops) {
        for (const Value *v : op->operands)
          extend(v, op);
        if (op->kind == OpKind::Fused)
          continue;
        for (const auto &inner : op->regions) {
          uses(*inner);
          for (const Value *y : inner->yields)
            extend(y, op, true);
        }
      }
    };
    if (&r == &g_.body)
      uses(r);
  }

  int lastOfRegion(const Region &r) const {
    int last = 0;
    for (const Op *op : r.ops)
      last = std::max(last, spans_.end(op));
    return last;
  }

  // A use of v by `user`; `yielded`: v is what one of user's regions yields.
  void extend(const Value *v, const Op *user, bool yielded = false) {
    auto it = index_.find(v);
    if (it == index_.end())
      return;
    PlannedBuffer &b = plan_.buffers[it->second];
    b.last = std::max(b.last, useEnd(v->def, user));
    if (int loopEnd = spans_.loopUseEnd(v->def, user); loopEnd >= 0 || yielded)
      held_[v] = std::max(held_[v], yielded ? spans_.end(user) : loopEnd);
  }

  // An in-place op (an elementwise one) reads element i only to write element i: its
  // result may take the bytes of an equally sized operand that dies there: read there for
  // the last time, and not held past it, which its lifetime's end cannot tell at a loop
  // body's last op: a value from outside the loop is read again by the next iteration,
  // and a yield is copied after the body.
  bool mayShare(const PlannedBuffer &result, const PlannedBuffer &operand) const {
    auto held = held_.find(operand.value);
    return operand.last == result.first && (held == held_.end() || held->second < result.first) &&
           result.bytes == operand.bytes && writesInPlace(*result.value->def, operand.value, result.value);
  }

  static bool conflict(const PlannedBuffer &a, const PlannedBuffer &b) { return !(a.last < b.first || b.last < a.first); }

  // A max over polynomials, kept flat (no max nested in max, whose canonical text would
  // grow exponentially): adding a candidate drops every member it provably dominates,
  // and the candidate itself when a member dominates it.
  using MaxList = std::vector<sym::ExprRef>;
  void addCandidate(MaxList &list, sym::ExprRef e) const {
    for (sym::ExprRef m : list)
      if (m == e || analyzer_.canProve(m, sym::Rel::GE, e))
        return;
    list.erase(std::remove_if(list.begin(), list.end(), [&](sym::ExprRef m) { return analyzer_.canProve(e, sym::Rel::GE, m); }),
               list.end());
    list.push_back(e);
  }
  static sym::ExprRef maxExpr(const MaxList &list) {
    if (list.empty())
      return sym::constant(0);
    sym::ExprRef out = list[0];
    for (size_t k = 1; k < list.size(); ++k)
      out = sym::max(out, list[k]);
    return out;
  }
  bool provablyAtLeast(const MaxList &a, const MaxList &b) const {
    // max(a) >= max(b) when every member of b is below some member of a.
    for (sym::ExprRef y : b)
      if (std::none_of(a.begin(), a.end(), [&](sym::ExprRef x) { return analyzer_.canProve(x, sym::Rel::GE, y); }))
        return false;
    return true;
  }

  static constexpr size_t kMaxSearch = 32;

  // Places the buffers whose `late` flag is `late` in their own arena; returns its size.
  sym::ExprRef place(bool late) {
    std::vector<size_t> byBytes;
    for (size_t k = 0; k < plan_.buffers.size(); ++k)
      if (plan_.buffers[k].late == late)
        byBytes.push_back(k);
    std::stable_sort(byBytes.begin(), byBytes.end(), [&](size_t x, size_t y) {
      if (plan_.buffers[x].kept != plan_.buffers[y].kept)
        return plan_.buffers[x].kept;
      return atReference(plan_.buffers[x].bytes) > atReference(plan_.buffers[y].bytes);
    });
    std::vector<MaxList> offsets(plan_.buffers.size());
    std::vector<size_t> placed;
    MaxList arena;
    auto shifted = [&](const MaxList &list, sym::ExprRef by) {
      MaxList out;
      for (sym::ExprRef e : list)
        addCandidate(out, analyzer_.simplify(sym::add(e, by)));
      return out;
    };
    for (size_t k : byBytes) {
      PlannedBuffer &b = plan_.buffers[k];
      std::vector<size_t> conflicting;
      for (size_t p : placed)
        if (conflict(b, plan_.buffers[p]))
          conflicting.push_back(p);
      // The lowest offset (at the reference binding) among 0 and the ends of the
      // conflicting buffers at which b provably clears every one of them: wholly above
      // it, or wholly below its start (a gap the analyzer proves b fits in).
      auto fits = [&](const MaxList &at) {
        MaxList atEnd = shifted(at, b.bytes);
        for (size_t c : conflicting) {
          const MaxList &start = offsets[c];
          if (!provablyAtLeast(at, shifted(start, plan_.buffers[c].bytes)) && !provablyAtLeast(start, atEnd))
            return false;
        }
        return true;
      };
      // The search for a gap and for an in-place slot costs the cube of the buffers
      // live beside b (each candidate against each neighbour, by proofs): past
      // kMaxSearch of them (a concat of hundreds of computed operands) b goes above
      // them all, which keeps planning near-linear.
      const bool search = conflicting.size() <= kMaxSearch;
      std::vector<MaxList> candidates{MaxList{sym::constant(0)}};
      if (search)
        for (size_t c : conflicting)
          candidates.push_back(shifted(offsets[c], plan_.buffers[c].bytes));
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](const MaxList &x, const MaxList &y) { return atReference(maxExpr(x)) < atReference(maxExpr(y)); });
      MaxList offset;
      for (const MaxList &at : candidates)
        if ((search || conflicting.empty()) && fits(at)) {
          offset = at;
          break;
        }
      if (offset.empty()) // above everything that conflicts: always valid
        for (size_t c : conflicting)
          for (sym::ExprRef end : shifted(offsets[c], plan_.buffers[c].bytes))
            addCandidate(offset, end);
      // In place: exactly the slot of an operand that dies here, when every other live
      // buffer provably lies wholly below or above that slot.
      std::optional<size_t> slot;
      for (size_t o : conflicting) {
        if (slot || !search || !mayShare(b, plan_.buffers[o]))
          continue;
        bool clear = true;
        for (size_t c : conflicting)
          if (c != o && !provablyAtLeast(offsets[o], shifted(offsets[c], plan_.buffers[c].bytes)) &&
              !provablyAtLeast(offsets[c], shifted(offsets[o], b.bytes)))
            clear = false;
        if (clear)
          slot = o;
      }
      if (slot) {
        offsets[k] = offsets[*slot];
        b.inPlace = true;
      } else {
        offsets[k] = offset.empty() ? MaxList{sym::constant(0)} : offset;
      }
      b.offset = maxExpr(offsets[k]);
      for (sym::ExprRef end : shifted(offsets[k], b.bytes))
        addCandidate(arena, end);
      placed.push_back(k);
    }
    return maxExpr(arena);
  }

  const Graph &g_;
  const std::function<bool(const Op &)> &produces_;
  sym::Analyzer analyzer_;
  std::set<std::string> inputDims_;
  // Planned values held to a position by a loop rather than by a read there: a value read
  // inside a loop that does not make it (to the loop's end), a loop body's yield (to the
  // body's end).
  std::map<const Value *, int> held_;
  std::map<std::string, int64_t> reference_;
  std::set<const Value *> outputs_;
  OpSpans spans_{g_.body};
  std::map<const Value *, size_t> index_;
  MemoryPlan plan_;
};

} // namespace

MemoryPlan planMemory(const Graph &g, const std::function<bool(const Op &)> &producesBuffer) {
  MemoryPlan plan = Planner(g, producesBuffer).run();
  std::set<size_t> updated;
  for (const Graph::Update &u : g.updates)
    if (const Value *t = updateTarget(g, u); t && u.output < g.body.yields.size()) {
      plan.inPlaceOutputs.emplace_back(g.body.yields[u.output], t);
      updated.insert(u.output);
    }
  plan.outputBytes = sym::constant(0);
  for (size_t k = 0; k < g.body.yields.size(); ++k)
    if (!updated.count(k))
      plan.outputBytes = sym::add(plan.outputBytes, g.body.yields[k]->type.bytes());
  return plan;
}

std::string print(const MemoryPlan &plan, const Graph &g) {
  std::string out = fmt::format("memory plan for model {}: {} buffers\n", g.name, plan.buffers.size());
  out += fmt::format("arena bytes = {}\n", plan.arena->str());
  if (plan.lateArena)
    out += fmt::format("arena after sync points bytes = {}\n", plan.lateArena->str());
  for (const PlannedBuffer &b : plan.buffers) {
    const Value *v = b.value;
    std::string name = v->name.empty() ? fmt::format("%{}", v->id) : fmt::format("%{}.{}", v->name, v->id);
    out += fmt::format("  {:<14} {:<22} live [{}, {}]  bytes {}  at {}{}{}{}  # {}\n", name, v->type.str(), b.first, b.last,
                       b.bytes->str(), b.offset->str(), b.inPlace ? "  (in place)" : "", b.late ? "  (after sync point)" : "",
                       b.kept ? "  (kept between calls)" : "", sourceLine(g, v->loc));
  }
  for (const Value *v : plan.unplanned)
    out += fmt::format("  not planned: %{} {} (its size is known only while the model runs)\n", v->id, v->type.str());
  if (!plan.inPlaceOutputs.empty()) {
    out += fmt::format("outputs bytes = {} ({} more written in place over the params and inputs they update)\n",
                       plan.outputBytes->str(), plan.inPlaceOutputs.size());
    for (const auto &[y, t] : plan.inPlaceOutputs)
      out += fmt::format("  %{} {} in place over {} {}\n", y->id, y->type.str(),
                         t->def ? "param" : "input", t->def ? t->def->get<std::string>("name") : t->name);
  }
  return out;
}

} // namespace dnnc::ir
