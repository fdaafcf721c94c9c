// The op registry's facts agree with one another, and the verifier re-checks each op's
// dtype and shape rule and its normalized axes.
#include "frontend/Sema.h"
#include "tests/unit/CheckedProgram.h"
#include "ir/graph/OpRegistry.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>

using namespace dnnc;
using ir::OpFlag;
using ir::OpPattern;
using ir::Placement;

namespace {

size_t tensorParams(const ir::OpInfo &op) {
  size_t n = 0;
  for (const ir::ParamSpec &p : op.signature)
    n += p.kind == ir::ParamSpec::Kind::Tensor || p.kind == ir::ParamSpec::Kind::TensorList;
  return n;
}

bool hasParam(const ir::OpInfo &op, const std::string &name) {
  for (const ir::ParamSpec &p : op.signature)
    if (p.name == name)
      return true;
  return false;
}

} // namespace

TEST_CASE("the registry's facts agree with one another", "[ir]") {
  const ir::ShapeRule broadcastRule = ir::opInfo(ir::OpKind::Add).shapeRule;
  std::set<std::string> spellings;
  for (const ir::OpInfo &op : ir::allOps()) {
    INFO(op.spelling);
    CHECK(spellings.insert(op.spelling).second);
    // Every elementwise op with a float result has a gradient rule (comparisons and logic
    // make bools, which pass none).
    if (ir::isElementwise(op.kind) && op.dtypeRule != ir::DTypeRule::Compare && op.dtypeRule != ir::DTypeRule::Logical)
      CHECK(op.grad != nullptr);
    CHECK(!ir::opVerb(op.kind).empty());
    if (*op.verb) // an explicit verb names something a user can call
      CHECK(op.callable());
    if (ir::isElementwise(op.kind)) {
      // One result at the broadcast shape of the operands, run in a kernel, in place.
      CHECK(op.shapeRule == broadcastRule);
      CHECK(op.shapeClass == ir::ShapeClass::ISDOS);
      CHECK(op.placement == Placement::Kernel);
      CHECK(op.has(OpFlag::InPlace));
      CHECK((op.pattern == OpPattern::Elementwise ? tensorParams(op) == 1 : tensorParams(op) >= 2));
    } else {
      CHECK(op.shapeRule != broadcastRule);
    }
    if (op.has(OpFlag::InPlace)) // only where element i is read just to write element i
      CHECK((ir::isElementwise(op.kind) || op.kind == ir::OpKind::Fused));
    if (op.placement != Placement::Kernel) { // never fused, never lowered
      CHECK(op.pattern == OpPattern::Opaque);
      CHECK(op.flags == 0);
    }
    if (op.placement == Placement::Structural) {
      CHECK(op.shapeRule == nullptr);
      CHECK(!op.callable());
    }
    if (op.placement == Placement::Kernel && op.kind != ir::OpKind::Fused)
      CHECK(op.shapeRule != nullptr);
    if (ir::isReduction(op.kind))
      CHECK(hasParam(op, "axis"));
    if (op.has(OpFlag::Fill)) {
      CHECK(tensorParams(op) == 0);
      CHECK(op.pattern == OpPattern::Opaque); // a producer in any group, never a root
    }
    if (op.has(OpFlag::ReadsIdx) && op.callable())
      CHECK(tensorParams(op) >= 2);
    if (op.has(OpFlag::ParamView))
      CHECK(op.pattern == OpPattern::Injective);
    if (op.pattern == OpPattern::OutFusable)
      CHECK(tensorParams(op) >= 1);
    // docs/builtins.md is generated from these: every op a user calls says what it computes
    // and its NumPy and PyTorch equivalents; the others say nothing.
    CHECK(op.callable() == (*op.semantics != 0));
    CHECK(op.callable() == (*op.numpy != 0));
    CHECK(op.callable() == (*op.torch != 0));
  }
}

namespace {

// The first op of kind `k` in the model's body.
ir::Op *firstOp(test::CheckedProgram &c, ir::OpKind k) {
  for (ir::Op *o : c.graph().body.ops)
    if (o->kind == k)
      return o;
  FAIL("no such op");
  return nullptr;
}

} // namespace

TEST_CASE("the verifier re-checks each op's dtype and shape rule", "[ir]") {
  auto c = test::checkProgram(R"(
dim B;
model main(a: f32[B, 4], b: f32[B, 4], ids: i64[B]) -> (f32[B, 4], f32[]) {
  let s = softmax(a + b, axis = -1);
  let u = unique(ids);
  return (s, sum(cast(u, f32)));
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  REQUIRE_NOTHROW(ir::verify(c->graph(), c->analyzer())); // unique's fresh dim included

  ir::Value *sum = firstOp(*c, ir::OpKind::Add)->results[0];
  const ir::TensorType good = sum->type;
  sum->type.dtype = ir::DType::I64; // the wrong element type
  CHECK_THROWS_WITH(ir::verify(c->graph(), c->analyzer()), Catch::Contains("but its rule gives f32[B, 4]"));
  CHECK_NOTHROW(ir::verify(c->graph())); // the structural checks alone cannot see it
  sum->type = good;
  sum->type.dims[1] = sym::constant(5); // the wrong shape
  CHECK_THROWS_WITH(ir::verify(c->graph(), c->analyzer()), Catch::Contains("holds f32[B, 5]"));
  sum->type.dims.pop_back(); // the wrong rank
  CHECK_THROWS_AS(ir::verify(c->graph(), c->analyzer()), InternalError);
  sum->type = good;

  // Sema normalized the axis; a negative one left in the IR is caught.
  ir::Op *softmax = firstOp(*c, ir::OpKind::Softmax);
  const ir::Attr axis = softmax->attrs.at("axis");
  CHECK(ir::attrText(axis) == "1");
  softmax->attrs["axis"] = int64_t{-1};
  CHECK_THROWS_WITH(ir::verify(c->graph(), c->analyzer()), Catch::Contains("not normalized"));
  softmax->attrs["axis"] = axis;

  // An EDO result's fresh dim cannot be re-derived (it passed above), but its dtype can.
  ir::Value *uniq = firstOp(*c, ir::OpKind::Unique)->results[0];
  uniq->type.dtype = ir::DType::F32;
  CHECK_THROWS_WITH(ir::verify(c->graph(), c->analyzer()), Catch::Contains("op 'unique'"));
}

namespace {
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step;
};

// NumPy's length of x[start:stop:step] on n elements for a positive step.
int64_t numpySliceLength(int64_t n, const Slice &s) {
  auto clampBound = [n](std::optional<int64_t> b, int64_t dflt) {
    int64_t v = b ? (*b < 0 ? *b + n : *b) : dflt;
    return std::clamp<int64_t>(v, 0, n);
  };
  int64_t start = clampBound(s.start, 0), stop = clampBound(s.stop, n);
  return stop <= start ? 0 : (stop - start + s.step - 1) / s.step;
}
} // namespace

// Each slice's length nests the previous one twice inside max and floor division; the
// analyzer once re-simplified and re-bounded every operand at every level (time exponential
// in the depth: three chained slices took 30 s), and an empty slice kept its unprovable
// length expression, so slicing it again nested further (difftest seed 916959).
TEST_CASE("chained slices with negative starts and steps get NumPy's lengths", "[ir]") {
  const std::vector<std::vector<Slice>> chains = {
      {{-6, std::nullopt, 2}, {-5, -1, 3}, {1, -1, 2}, {-4, std::nullopt, 3}, {-2, std::nullopt, 1},
       {1, std::nullopt, 2}, {-5, std::nullopt, 3}, {-1, std::nullopt, 1}},
      {{-6, 0, 2}, {-3, 0, 3}, {3, -1, 3}, {-2, std::nullopt, 2}, {1, std::nullopt, 1}, {-4, 0, 2}, {-2, std::nullopt, 3},
       {-1, std::nullopt, 1}},
      {{std::nullopt, -1, 1}, {-7, std::nullopt, 2}, {std::nullopt, std::nullopt, 3}, {-3, std::nullopt, 1},
       {1, std::nullopt, 2}, {-6, -1, 2}, {-3, std::nullopt, 1}, {std::nullopt, std::nullopt, 2}}};
  for (const auto &chain : chains) {
    std::string text = "dim C in 1..64;\nmodel main(x: f32[C]) -> f32[N] {\n  let v0 = x;\n";
    auto bound = [](std::optional<int64_t> b) { return b ? std::to_string(*b) : std::string(); };
    for (size_t i = 0; i < chain.size(); ++i)
      text += fmt::format("  let v{} = v{}[{}:{}:{}];\n", i + 1, i, bound(chain[i].start), bound(chain[i].stop),
                          chain[i].step);
    text += fmt::format("  return v{};\n}}\n", chain.size());
    auto c = test::checkProgram(text);
    INFO(text << c->errors);
    REQUIRE(c->ok);
    std::map<std::string, sym::ExprRef> dims;
    for (const auto &v : c->graph().values())
      if (!v->name.empty() && v->type.rank() == 1)
        dims[v->name] = v->type.dims[0];
    for (int64_t n = 1; n <= 64; ++n) {
      int64_t want = n;
      for (size_t i = 0; i < chain.size(); ++i) {
        want = numpySliceLength(want, chain[i]);
        INFO("C = " << n << ", v" << i + 1 << " : " << dims.at(fmt::format("v{}", i + 1))->str());
        CHECK(sym::evaluate(dims.at(fmt::format("v{}", i + 1)), {{"C", n}}) == want);
      }
    }
  }
}
