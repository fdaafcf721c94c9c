// The graph verifier, run after construction (and after each pass with --verify-each).
// Contract: every operand is defined earlier in its region or an enclosing one (or is an
// argument of one), every value is typed with non-null dims, and region yields match
// their op's results; given the model's analyzer, every rule-typed op's dtype and shape
// rule still gives the types it holds and its axis attributes are normalized.
#include "ir/graph/Graph.h"
#include "ir/graph/OpRegistry.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace dnnc::ir {
namespace {

// The name the verifier gives every fresh dim a rule asks for: a dim made when the op
// ran (EDO) or bound by a run-time value cannot be re-derived, so it is not compared.
constexpr const char *kFresh = "$fresh";

class Verifier {
public:
  explicit Verifier(const sym::Analyzer *analyzer) : analyzer_(analyzer) {}

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
      if (analyzer_ && opInfo(op->kind).shapeRule)
        checkRule(*op);
    }
    for (const Value *y : r.yields)
      if (!visible_.count(y))
        throw InternalError(fmt::format("verifier: yielded value %{} is not visible in its region", y->id));
    for (const Value *v : added)
      visible_.erase(v);
  }

private:
  const sym::Analyzer *analyzer_;
  std::unordered_set<const Value *> visible_;

  // Re-runs the op's dtype and shape rule on its operands' types.
  void checkRule(const Op &op) {
    RuleContext rc{op, *analyzer_, [](const std::string &) { return sym::var(kFresh); }};
    std::vector<TensorType> types;
    try {
      types = inferResultTypes(rc);
    } catch (const RuleError &e) {
      fail(op, "its rule no longer accepts its operands: " + e.message);
    }
    if (types.size() != op.results.size())
      fail(op, fmt::format("it has {} results but its rule gives {}", op.results.size(), types.size()));
    for (size_t i = 0; i < types.size(); ++i) {
      const TensorType &have = op.results[i]->type;
      bool same = types[i].dtype == have.dtype && types[i].rank() == have.rank();
      for (size_t k = 0; same && k < have.rank(); ++k) {
        auto vars = sym::freeVars(types[i].dims[k]);
        bool fresh = std::find(vars.begin(), vars.end(), kFresh) != vars.end();
        same = fresh || types[i].dims[k] == have.dims[k] || analyzer_->canProve(types[i].dims[k], sym::Rel::EQ, have.dims[k]);
      }
      if (!same)
        fail(op, fmt::format("it holds {} but its rule gives {}", have.str(), types[i].str()));
    }
    for (const auto &[name, normalized] : rc.normalizedAxes)
      if (attrText(normalized) != attrText(op.attrs.at(name)))
        fail(op, fmt::format("its {} is {}, not normalized to {}", name, attrText(op.attrs.at(name)), attrText(normalized)));
  }
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

void verify(const Graph &g) { Verifier(nullptr).region(g.body); }

void verify(const Graph &g, const sym::Analyzer &analyzer) { Verifier(&analyzer).region(g.body); }

} // namespace dnnc::ir
