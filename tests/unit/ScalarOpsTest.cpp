// ir/graph/ScalarOps.def against the op registry: every elementwise op is a scalar op of
// the table (or one that lowering builds from others), with the table's arity, so no
// elementwise op reaches the kernel emitter or the oracle without its scalar function.
#include "ir/graph/OpRegistry.h"
#include "ir/graph/ScalarOps.h"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace dnnc;

TEST_CASE("the scalar op table covers the registry's elementwise ops", "[ir]") {
  for (const ir::OpInfo &op : ir::allOps()) {
    INFO(op.spelling);
    std::optional<ir::UnaryOp> unary = ir::asUnaryOp(op.kind);
    std::optional<ir::BinaryOp> binary = ir::asBinaryOp(op.kind);
    CHECK(!(unary && binary));
    // where, clip and cast lower to select, maximum/minimum and a conversion.
    bool composite = op.kind == ir::OpKind::Where || op.kind == ir::OpKind::Clip || op.kind == ir::OpKind::Cast;
    CHECK((unary || binary) == (ir::isElementwise(op.kind) && !composite));
    auto tensors = std::count_if(op.signature.begin(), op.signature.end(),
                                 [](const ir::ParamSpec &p) { return p.kind == ir::ParamSpec::Kind::Tensor; });
    if (unary)
      CHECK(tensors == 1);
    if (binary)
      CHECK(tensors == 2);
  }
}
