// Rank and Dimension Propagation through sema: joins, loop fixpoints, affine growth,
// backward pinning, ISVDOS folding, and the verifier.
#include "frontend/Sema.h"
#include "tests/unit/CheckedProgram.h"
#include "ir/graph/OpRegistry.h"
#include "ir/transforms/RankDimPropagation.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

using namespace dnnc;

namespace {

using Checked = test::CheckedProgram;
const auto check = test::checkProgram;

const NamedValue &value(Checked &c, const std::string &name) {
  const NamedValue *found = nullptr;
  for (const NamedValue &v : c.program.models().at(0).values)
    if (v.name == name)
      found = &v;
  REQUIRE(found);
  return *found;
}

} // namespace

TEST_CASE("a cache grown by one row per iteration ends with dim T0 + n", "[rdp]") {
  auto c = check(R"(
dim B; dim T0; dim n;
model main(x: f32[B, T0, 8], row: f32[B, 1, 8]) -> f32[B, T, 8] {
  var cache = x;
  for i in 0..n {
    cache = concat([cache, row], axis = 1);
  }
  return cache;
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  CHECK(value(*c, "out0").type.str() == "f32[B, T0 + n, 8]");
  CHECK(value(*c, "out0").shapeClass == ir::ShapeClass::ISDOS);
}

TEST_CASE("growth by a constant per iteration is scaled by the trip count", "[rdp]") {
  auto c = check(R"(
dim T0;
model main(x: f32[T0], pair: f32[2]) -> f32[T] {
  var v = x;
  for i in 3..10 {
    v = concat([pair, v], axis = 0);
  }
  return v;
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  CHECK(value(*c, "out0").type.str() == "f32[T0 + 14]");
}

TEST_CASE("growth that is not affine gives a fresh EDO dim", "[rdp]") {
  auto c = check(R"(
dim T0; dim n;
model main(x: f32[T0]) -> f32[T] {
  var v = x;
  for i in 0..n {
    v = concat([v, v], axis = 0);
  }
  return v;
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  const NamedValue &out = value(*c, "out0");
  CHECK(out.shapeClass == ir::ShapeClass::EDO);
  REQUIRE(out.type.dims[0]->asVar());
  CHECK(out.type.dims[0]->asVar()->name == "T"); // the fresh dim, named by the result type
}

namespace {

// RDP's loop fixpoint driven directly, with a body whose growth per iteration is given by
// `grow(build, generic)`; counts what the policy asks of the frontend.
struct FakeLoop {
  sym::Analyzer an;
  int builds = 0, discards = 0, attempts = 0, abandons = 0, fresh = 0;
  std::function<std::vector<ir::TensorType>(const std::vector<ir::TensorType> &)> grow;

  ir::LoopFixpoint run(const std::vector<ir::TensorType> &entry) {
    ir::PropagationContext ctx{an, [&](const std::string &hint) {
                                 std::string name = fresh++ ? hint + std::to_string(fresh) : hint;
                                 an.declare(name, 0);
                                 return sym::var(name);
                               }};
    ir::LoopBody body{[&](const std::vector<ir::TensorType> &carried) {
                        ++builds;
                        return grow(carried);
                      },
                      [&] { ++discards; }, [&] { ++attempts; }, [&] { ++abandons; }};
    return ir::loopFixpoint(entry, body, ctx);
  }
};

ir::TensorType vec(std::vector<sym::ExprRef> dims) { return ir::TensorType{ir::DType::F32, std::move(dims)}; }

} // namespace

TEST_CASE("loop fixpoint: equal entries growing alike share one generic dim", "[rdp]") {
  FakeLoop loop;
  loop.an.declare("N", 1);
  loop.grow = [](const std::vector<ir::TensorType> &carried) {
    std::vector<ir::TensorType> after;
    for (const ir::TensorType &t : carried)
      after.push_back(vec({sym::add(t.dims[0], sym::constant(1))}));
    return after;
  };
  ir::LoopFixpoint fix = loop.run({vec({sym::var("N")}), vec({sym::var("N")})});
  CHECK(fix.generic[0].str() == "f32[L]");
  CHECK(fix.generic[1].str() == "f32[L]");
  CHECK(fix.afterOne[1].str() == "f32[L + 1]");
  CHECK(loop.an.range("L").lo == 1); // bounded below by the entry size: the loop only grows it
  CHECK(loop.builds == 2);
  CHECK(loop.discards == 1);
  CHECK(loop.abandons == 0);
}

TEST_CASE("loop fixpoint: a shared growth the last build does not confirm is redone per axis", "[rdp]") {
  FakeLoop loop;
  loop.an.declare("N", 1);
  // Both grow by 1 from the entry size, but by 1 and 2 once generic.
  loop.grow = [](const std::vector<ir::TensorType> &carried) {
    std::vector<ir::TensorType> after;
    for (size_t k = 0; k < carried.size(); ++k) {
      bool entry = carried[k].dims[0] == sym::var("N");
      after.push_back(vec({sym::add(carried[k].dims[0], sym::constant(entry ? 1 : static_cast<int64_t>(k) + 1))}));
    }
    return after;
  };
  ir::LoopFixpoint fix = loop.run({vec({sym::var("N")}), vec({sym::var("N")})});
  CHECK(fix.generic[0].str() == "f32[L2]");
  CHECK(fix.generic[1].str() == "f32[L3]");
  CHECK(fix.afterOne[1].str() == "f32[L3 + 2]");
  CHECK(loop.attempts == 2);
  CHECK(loop.abandons == 1);
  CHECK(loop.builds == 4);
}

TEST_CASE("loop fixpoint: three widening passes, then the last build is final", "[rdp]") {
  FakeLoop loop;
  loop.an.declare("N", 1);
  // Each build varies the first axis still at its entry size, so it never settles.
  loop.grow = [](const std::vector<ir::TensorType> &carried) {
    ir::TensorType t = carried[0];
    for (auto &d : t.dims)
      if (d == sym::var("N")) {
        d = sym::add(d, sym::constant(1));
        break;
      }
    return std::vector<ir::TensorType>{t};
  };
  auto n = sym::var("N");
  ir::LoopFixpoint fix = loop.run({vec({n, n, n, n})});
  CHECK(loop.builds == 4);
  CHECK(fix.generic[0].dims[3] == n); // found varying by the last build: not widened
  CHECK(fix.generic[0].dims[2] != n);
}

TEST_CASE("if joins agreeing dims and generalizes differing ones", "[rdp]") {
  auto c = check(R"(
dim B; dim S; dim T;
model main(x: f32[B, S], z: f32[B, T], c: bool[]) -> (f32[B, J], f32[B, S]) {
  var y = x;
  var same = x;
  if c {
    y = z;
    same = x * 2.0;
  }
  return (y, same);
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  CHECK(value(*c, "out0").type.str() == "f32[B, J]");
  CHECK(value(*c, "out0").shapeClass == ir::ShapeClass::EDO);
  CHECK(value(*c, "out1").type.str() == "f32[B, S]");
}

TEST_CASE("shape-only values fold to dim expressions (ISVDOS becomes ISDOS)", "[rdp]") {
  auto c = check(R"(
dim B; dim T;
model main(x: f32[B, T, 4]) -> f32[B, K] {
  let flat = reshape(x, [shape(x, 0), shape(x, 1) * 4]);
  let same = reshape(flat, [B, -1]);
  return same;
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  CHECK(value(*c, "flat").type.str() == "f32[B, 4*T]");
  CHECK(value(*c, "flat").shapeClass == ir::ShapeClass::ISDOS);
  CHECK(value(*c, "same").type.str() == "f32[B, 4*T]");
}

// Each clamp of a slice's bounds names the sliced dim once more; clamps that cannot
// matter are left out and clamps of clamps fold, so a chain of slices is one clamp, not
// a formula naming N 2^links times.
TEST_CASE("a chain of slices keeps its dims linear in the chain's length", "[rdp]") {
  std::string source = "dim N;\nmodel main(x: f32[N]) -> f32[_] {\n  let a0 = x;\n";
  const int links = 40;
  for (int i = 1; i <= links; ++i)
    source += fmt::format("  let a{} = a{}[1:];\n", i, i - 1);
  source += fmt::format("  let s = x[2:N];\n  let e = x[N + 3:];\n  return a{};\n}}\n", links);
  auto c = check(source);
  INFO(c->errors);
  REQUIRE(c->ok);
  CHECK(value(*c, "a1").type.str() == "f32[N - 1]"); // dims are >= 1
  CHECK(value(*c, "s").type.str() == "f32[max(0, N - 2)]");
  CHECK(value(*c, "e").type.str() == "f32[0]");
  CHECK(value(*c, "a2").type.str() == "f32[max(0, N - 2)]");
  CHECK(value(*c, fmt::format("a{}", links)).type.str() == fmt::format("f32[max(0, N - {})]", links));
}

TEST_CASE("shapes fed by tensor values are ISVDOS with fresh dims", "[rdp]") {
  auto c = check(R"(
dim N;
model main(x: f32[N], k: i64[]) -> f32[M] {
  let (top, idx) = topk(x, k);
  let z = zeros([k, 3]);
  return top;
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  CHECK(value(*c, "top").shapeClass == ir::ShapeClass::ISVDOS);
  CHECK(value(*c, "z").shapeClass == ir::ShapeClass::ISVDOS);
  CHECK(value(*c, "z").type.dims[1]->str() == "3");
}

TEST_CASE("annotations name EDO dims and pin them backward", "[rdp]") {
  auto c = check(R"(
dim N;
model main(m: bool[N], x: f32[N]) -> f32[K] {
  let idx: i64[K, 1] = nonzero(m);
  let picked: f32[K] = masked_select(x, m);
  return picked;
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  CHECK(value(*c, "idx").type.str() == "i64[K, 1]");
  CHECK(value(*c, "picked").type.str() == "f32[K]");
  // The pinned equality is checked at run time.
  bool asserted = false;
  for (const ir::Op *op : c->program.models()[0].graph->body.ops)
    asserted |= op->kind == ir::OpKind::AssertDims;
  CHECK(asserted);
}

TEST_CASE("assert facts let unrelated dims combine", "[rdp]") {
  auto bad = check(R"(
dim S; dim T;
model main(x: f32[S], y: f32[T]) -> f32[S] { return x + y; })");
  CHECK_FALSE(bad->ok);
  CHECK(bad->errors.find("[unprovable-equality]") != std::string::npos);
  auto good = check(R"(
dim S; dim T;
model main(x: f32[S], y: f32[T]) -> f32[S] {
  assert S == T;
  return x + y;
})");
  INFO(good->errors);
  CHECK(good->ok);
}

TEST_CASE("rank polymorphism and per-call dim unification", "[rdp]") {
  auto c = check(R"(
import nn;
dim B; dim T;
param w: f32[16, 8];
model main(a: f32[B, T, 16], b: f32[16]) -> (f32[B, T, 8], f32[8]) {
  return (nn.linear(a, w), nn.linear(b, w));
})");
  INFO(c->errors);
  REQUIRE(c->ok);
  CHECK(value(*c, "out0").type.str() == "f32[B, T, 8]");
  CHECK(value(*c, "out1").type.str() == "f32[8]");
}

TEST_CASE("the verifier rejects a use before its definition", "[ir]") {
  ir::Graph g;
  ir::Op *late = g.newOp(ir::OpKind::Relu, {});
  ir::Value *v = g.newValue({ir::DType::F32, {}});
  v->def = late;
  late->results.push_back(v);
  ir::Op *early = g.newOp(ir::OpKind::Neg, {});
  early->operands.push_back(v);
  g.body.ops = {early, late};
  CHECK_THROWS_AS(ir::verify(g), InternalError);
  g.body.ops = {late, early};
  late->operands.push_back(v); // now it uses its own result
  CHECK_THROWS_AS(ir::verify(g), InternalError);
}

TEST_CASE("every op in the registry is complete", "[ir]") {
  for (const ir::OpInfo &op : ir::allOps()) {
    INFO(op.spelling);
    if (op.callable())
      CHECK(op.shapeRule != nullptr);
    CHECK(ir::opInfo(op.kind).spelling == op.spelling);
  }
}

TEST_CASE("every example and every stdlib fn type-checks", "[frontend]") {
  for (const auto &entry : std::filesystem::directory_iterator(DNNC_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".dnn")
      continue;
    Program p;
    DiagnosticEngine diags(p.sources());
    bool ok = p.load(entry.path().string(), diags);
    std::ostringstream os;
    diags.render(os);
    INFO(entry.path().string() << "\n" << os.str());
    CHECK(ok);
  }
  // One call of each stdlib fn, on symbolic shapes.
  auto c = check(R"(
import nn;
dim B; dim T; dim N; dim H; dim W;
param w: f32[32, 32]; param w4: f32[32, 128]; param wh4: f32[8, 32]; param w3: f32[32, 24]; param wh3: f32[8, 24];
param g: f32[32]; param b: f32[32]; param b4: f32[32]; param b3: f32[24]; param wqkv: f32[32, 96];
param wc: f32[4, 3, 3, 3]; param g4: f32[4];
model main(x: f32[B, T, 32], img: f32[N, 3, H, W], h: f32[B, 8], xi: f32[B, 32], labels: i32[B, T]) -> f32[] {
  let a = nn.linear(x, w);
  let m = nn.mlp(x, w4, transpose(w4));
  let ln = nn.layer_norm(x, g, b);
  let rn = nn.rms_norm(x, g);
  let bn = nn.batch_norm(img, g4[0:3], g4[0:3], g4[0:3], g4[0:3]);
  let at = nn.attention(x, x, x, heads = 4);
  let ca = nn.causal_attention(x, wqkv, w, heads = 2);
  let (h2, c2) = nn.lstm_cell(xi, h, h, w, wh4, b4);
  let gr = nn.gru_cell(xi, h, w3, wh3, b3);
  let cb = nn.conv_block(img, wc, g4, g4);
  let d = nn.dropout(x);
  return nn.cross_entropy(x, labels);
})");
  INFO(c->errors);
  CHECK(c->ok);
}

TEST_CASE("every diagnostic kind has a failing-input golden test", "[diagnostics]") {
  std::string all;
  for (const auto &entry : std::filesystem::directory_iterator(DNNC_FAIL_TESTS_DIR)) {
    std::ifstream in(entry.path());
    std::ostringstream ss;
    ss << in.rdbuf();
    all += ss.str();
  }
  for (DiagKind k : allDiagKinds()) {
    INFO(diagTag(k));
    CHECK(all.find(std::string("[") + diagTag(k) + "]") != std::string::npos);
  }
}
