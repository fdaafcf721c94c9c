// Memory plans, their totals and the solver over a dim (see Memory.h).
#include "api/Memory.h"

#include "ir/graph/Serialize.h"

#include <fmt/format.h>

namespace dnnc::api {

PlannedMemory planMemory(const ir::Graph &g, const backend::CompileOptions &options) {
  PlannedMemory p;
  p.graph = ir::cloneGraph(g);
  p.plan = std::move(*backend::lowerFor(*p.graph, *backend::findTarget("cpu"), options).plan);
  return p;
}

MemorySummary summarizeMemory(const ir::Graph &g, const ir::MemoryPlan &plan) {
  MemorySummary s;
  s.arena = plan.arena;
  s.lateArena = plan.lateArena;
  std::vector<const ir::Value *> params;
  for (const ir::Op *op : g.body.ops)
    if (op->kind == ir::OpKind::Param)
      params.push_back(op->results[0]);
  s.paramCount = params.size();
  s.params = totalBytes(params);
  s.inputs = totalBytes(g.body.args);
  s.outputs = totalBytes(g.body.yields);
  return s;
}

std::string bytesText(sym::ExprRef e, const std::map<std::string, int64_t> &b, const sym::Analyzer &analyzer) {
  if (auto v = sym::evaluate(e, b))
    return std::to_string(*v);
  std::map<std::string, sym::ExprRef> bound;
  for (auto &[name, v] : b)
    bound[name] = sym::constant(v);
  try {
    return analyzer.simplify(sym::substitute(e, bound))->str();
  } catch (const std::overflow_error &) { // every dim is bound and the value needs more than 64 bits
    return "more than 2^63 - 1";
  }
}

SolveResult solveLargest(sym::ExprRef bytes, const std::string &dim, std::pair<int64_t, int64_t> range,
                         const std::map<std::string, int64_t> &bound, double limit,
                         const std::function<std::optional<int64_t>(const std::map<std::string, int64_t> &)> &bytesAt) {
  SolveResult r;
  for (const std::string &n : sym::freeVars(bytes))
    if (n != dim && !bound.count(n)) {
      r.kind = SolveResult::Unbound;
      r.unbound = n;
      return r;
    }
  std::map<std::string, int64_t> b = bound;
  // The bytes at dim = v; nullopt when they do not fit in 64 bits.
  auto at = [&](int64_t v) {
    b[dim] = v;
    return bytesAt ? bytesAt(b) : sym::evaluate(bytes, b);
  };
  auto fits = [&](std::optional<int64_t> n) { return n && static_cast<double>(*n) <= limit; };
  // (up to 2^62, past any size that 64 bits of bytes hold: a cap at 2^40 answered "any
  // value fits" for an arena of 2088 B bytes under 16000000 TiB)
  int64_t lo = std::max<int64_t>(range.first, 1), hi = std::min<int64_t>(range.second, int64_t{1} << 62);
  if (lo > hi)
    throw DataError(fmt::format("the range of {} holds no value to solve for", dim));
  if (auto n = at(lo); !fits(n)) {
    r.kind = SolveResult::None, r.value = lo, r.bytes = n;
    return r;
  }
  if (auto n = at(hi); fits(n)) {
    r.kind = SolveResult::Any, r.value = hi, r.bytes = n;
    return r;
  }
  while (hi - lo > 1) { // bytes(lo) fit, bytes(hi) do not
    int64_t mid = lo + (hi - lo) / 2;
    (fits(at(mid)) ? lo : hi) = mid;
  }
  r.value = lo;
  r.stoppedByOverflow = !at(hi); // the limit was not what stopped the search
  return r;
}

} // namespace dnnc::api
