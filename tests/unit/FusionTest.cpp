// Each fusion kind on its own: which ops it groups, that it leaves what it must alone,
// and that the fused graph computes what the unfused one does (reference interpreter).
#include "frontend/Sema.h"
#include "ir/interp/Interpreter.h"
#include "ir/transforms/Fusion.h"

#include <catch2/catch.hpp>

#include <random>

using namespace dnnc;

namespace {

const char *kModel = R"(dim B; dim T;
param w: f32[8, 8];
model main(x: f32[B, T, 8], y: f32[B, T, 8]) -> f32[B, T, 8] {
  let a = relu(x * y + 1.0);                                  # elementwise chain
  let t = reshape(transpose(reshape(a, [B, T, 2, 4]), [0, 1, 3, 2]), [B, T, 8]);  # injective
  let s = softmax(t - mean(t, axis = -1, keepdims = true));  # reduction prologue
  let z = sum(exp(s) * 2.0, axis = -1, keepdims = true);      # reduction prologue
  return tanh(s @ w) + z;                                     # GEMM epilogue
}
)";

struct Compiled {
  Program program;
  ir::Graph *graph = nullptr;
};

std::unique_ptr<Compiled> compile() {
  auto c = std::make_unique<Compiled>();
  DiagnosticEngine diags(c->program.sources());
  REQUIRE(c->program.loadText("fusion.dnn", kModel, diags));
  c->graph = c->program.models().at(0).graph.get();
  return c;
}

// Ops of each kind directly in the body, and inside fused ops.
std::map<ir::OpKind, int> census(const ir::Graph &g, bool insideFused) {
  std::map<ir::OpKind, int> out;
  for (const ir::Op *op : g.body.ops) {
    if (op->kind == ir::OpKind::Fused && insideFused)
      for (const ir::Op *m : op->regions[0]->ops)
        ++out[m->kind];
    if (!insideFused)
      ++out[op->kind];
  }
  return out;
}

std::vector<rt::Tensor> run(const ir::Graph &g) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  auto random = [&](std::vector<int64_t> shape) {
    rt::Tensor t = rt::Tensor::zeros(DType::F32, shape);
    for (size_t k = 0; k < t.numel(); ++k)
      t.set(k, normal(rng));
    return t;
  };
  std::vector<rt::Tensor> inputs{random({3, 5, 8}), random({3, 5, 8})};
  std::map<std::string, rt::Tensor> params{{"w", random({8, 8})}};
  return interp::Interpreter(g).run(inputs, params);
}

void sameResults(const ir::Graph &a, const ir::Graph &b) {
  auto x = run(a), y = run(b);
  REQUIRE(x.size() == y.size());
  for (size_t k = 0; k < x.size(); ++k) {
    REQUIRE(x[k].shape == y[k].shape);
    for (size_t i = 0; i < x[k].numel(); ++i)
      CHECK(x[k].get(i) == Approx(y[k].get(i)).margin(1e-6));
  }
}

} // namespace

TEST_CASE("elementwise fusion groups chains and GEMM epilogues, not reshapes or reductions", "[fusion]") {
  auto plain = compile(), fused = compile();
  ir::FusionStats s = ir::fuse(*fused->graph, {ir::FusionKind::Elementwise});
  CHECK(s.groups >= 2);
  auto inside = census(*fused->graph, true);
  CHECK(inside[ir::OpKind::Relu] == 1);  // relu(x * y + 1.0): one group
  CHECK(inside[ir::OpKind::Matmul] == 1); // tanh(s @ w) + z: the GEMM's epilogue
  CHECK(inside[ir::OpKind::Transpose] == 0);
  CHECK(inside[ir::OpKind::Softmax] == 0);
  sameResults(*plain->graph, *fused->graph);
}

TEST_CASE("injective fusion folds reshapes and transposes into index maps", "[fusion]") {
  auto plain = compile(), fused = compile();
  ir::fuse(*fused->graph, {ir::FusionKind::Injective});
  auto inside = census(*fused->graph, true), outside = census(*fused->graph, false);
  CHECK(inside[ir::OpKind::Transpose] == 1);
  CHECK(inside[ir::OpKind::Reshape] == 2);
  CHECK(outside[ir::OpKind::Transpose] == 0);
  CHECK(inside[ir::OpKind::Matmul] == 0); // GEMM epilogues belong to elementwise fusion
  sameResults(*plain->graph, *fused->graph);
}

TEST_CASE("reduction fusion takes elementwise prologues into reductions and softmax", "[fusion]") {
  auto plain = compile(), fused = compile();
  ir::fuse(*fused->graph, {ir::FusionKind::Reduction});
  auto inside = census(*fused->graph, true);
  CHECK(inside[ir::OpKind::Softmax] == 1); // softmax(t - mean(...)): the sub joins
  CHECK(inside[ir::OpKind::Sum] == 1);     // sum(exp(s) * 2.0): exp and mul join
  CHECK(inside[ir::OpKind::Exp] == 1);
  CHECK(inside[ir::OpKind::Relu] == 0); // a chain without a reduction is not this pass's
  sameResults(*plain->graph, *fused->graph);
}

TEST_CASE("a producer with a second use stays a buffer", "[fusion]") {
  auto fused = compile();
  ir::fuseAll(*fused->graph);
  // s feeds both the matmul and the sum: it must be materialized by its own kernel.
  bool softmaxOutside = false;
  for (const ir::Op *op : fused->graph->body.ops)
    for (const ir::Value *r : op->results)
      if (r->name == "s")
        softmaxOutside = true;
  CHECK(softmaxOutside);
}
