// The graph verifier, run after construction (and after each pass with --verify-each).
// Contract: every operand is defined earlier in its region or an enclosing one (or is an
// argument of one), every value is typed with non-null dims, and region yields match
// their op's results.
#include "ir/graph/Graph.h"
#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

#include <unordered_set>
#include <vector>

namespace dnnc::ir {
namespace {

class Verifier {
public:
  // `visible_` holds the values of the enclosing regions; a region's own are taken out
  // again when it ends (copying the set for each nested region was quadratic).
  void region(const Region &r) {
    std::vector<const Value *> added;
    auto see = [&](const Value *v) {
      if (visible_.insert(v).second)
        added.push_back(v);
    };
    for (const Value *a : r.args) {
      checkType(a);
      see(a);
    }
    for (const Op *op : r.ops) {
      for (const Value *v : op->operands)
        if (!visible_.count(v))
          fail(*op, fmt::format("operand %{} is used before it is defined or outside its scope", v->id));
      for (const auto &sub : op->regions)
        region(*sub);
      checkRegions(*op);
      for (const Value *v : op->results) {
        if (v->def != op)
          fail(*op, fmt::format("result %{} does not point back to its op", v->id));
        checkType(v);
        see(v);
      }
    }
    for (const Value *y : r.yields)
      if (!visible_.count(y))
        throw InternalError(fmt::format("verifier: yielded value %{} is not visible in its region", y->id));
    for (const Value *v : added)
      visible_.erase(v);
  }

private:
  std::unordered_set<const Value *> visible_;
  [[noreturn]] void fail(const Op &op, const std::string &what) {
    throw InternalError(fmt::format("verifier: {} (op '{}' at line {})", what, opInfo(op.kind).spelling, op.loc.begin.line));
  }
  void checkType(const Value *v) {
    for (auto d : v->type.dims)
      if (!d)
        throw InternalError(fmt::format("verifier: value %{} has an untyped dim", v->id));
  }
  void checkRegions(const Op &op) {
    switch (op.kind) {
    case OpKind::If:
      if (op.regions.size() != 2)
        fail(op, "an if needs two regions");
      for (const auto &r : op.regions)
        if (r->yields.size() != op.results.size())
          fail(op, "a branch yields a different number of values than the if has results");
      break;
    case OpKind::For:
    case OpKind::While: {
      size_t bodyIdx = op.kind == OpKind::While ? 1 : 0;
      if (op.regions.size() != bodyIdx + 1)
        fail(op, "a loop has the wrong number of regions");
      if (op.regions[bodyIdx]->yields.size() != op.results.size())
        fail(op, "the loop body yields a different number of values than the loop carries");
      break;
    }
    case OpKind::Fused:
      if (op.regions.size() != 1 || op.regions[0]->args.size() != op.operands.size() ||
          op.regions[0]->yields.size() != op.results.size())
        fail(op, "a fused op's region must take its operands and yield its results");
      break;
    default:
      if (!op.regions.empty())
        fail(op, "only control-flow and fused ops have regions");
    }
  }
};

} // namespace

void verify(const Graph &g) { Verifier().region(g.body); }

} // namespace dnnc::ir
