// The op registry's facts agree with one another, and the verifier re-checks each op's
// dtype and shape rule and its normalized axes.
#include "frontend/Sema.h"
#include "tests/unit/CheckedProgram.h"
#include "ir/graph/OpRegistry.h"

#include <catch2/catch.hpp>

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
