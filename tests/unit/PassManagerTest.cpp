// The pass manager: --verify-each names a pass that breaks the IR, printing names the
// pass around which it prints, and the default pipeline keeps the IR valid.
#include "frontend/Sema.h"
#include "ir/transforms/Pipeline.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

using namespace dnnc;

namespace {

const char *kModel = R"(dim B;
param w: f32[8, 8];
model main(x: f32[B, 8]) -> f32[B, 8] {
  let h = relu(x @ w + 1.0);
  return tanh(h) * 2.0;
}
)";

// A deliberately broken pass: moves the body's last op (which uses the ops before it) to
// the front, so an operand is used before it is defined.
void corrupt(ir::Graph &g, ir::PassState &) {
  std::rotate(g.body.ops.rbegin(), g.body.ops.rbegin() + 1, g.body.ops.rend());
}

ir::Graph &load(Program &p) {
  DiagnosticEngine diags(p.sources());
  REQUIRE(p.loadText("passes.dnn", kModel, diags));
  return *p.models().at(0).graph;
}

} // namespace

TEST_CASE("verifyEach catches a broken pass and names it", "[passes]") {
  Program p;
  ir::Graph &g = load(p);
  std::vector<ir::PassInfo> passes = ir::defaultPipeline({});
  passes.push_back({"corrupt", &corrupt, "test only: breaks the IR"});
  ir::PassOptions options;
  options.verifyEach = true;
  ir::PassState state;
  try {
    ir::PassManager(options).run(g, passes, state);
    FAIL("the broken pass went unnoticed");
  } catch (const InternalError &e) {
    std::string what = e.what();
    CHECK(what.find("after pass 'corrupt'") != std::string::npos);
    CHECK(what.find("used before it is defined") != std::string::npos);
  }
}

TEST_CASE("without verifyEach the broken pass is not checked", "[passes]") {
  Program p;
  ir::Graph &g = load(p);
  ir::PassState state;
  ir::PassManager({}).run(g, {{"corrupt", &corrupt, "test only"}}, state);
  CHECK_THROWS_AS(ir::verify(g), InternalError);
}

TEST_CASE("the default pipeline passes verifyEach and prints around the passes named", "[passes]") {
  Program p;
  ir::Graph &g = load(p);
  std::ostringstream printed;
  ir::PassOptions options;
  options.verifyEach = true;
  options.printBefore = {"fuse"};
  options.printAfter = {"all"};
  options.printTo = &printed;
  ir::PassState state;
  ir::PassManager(options).run(g, ir::defaultPipeline(options), state);
  std::string text = printed.str();
  size_t dropout = text.find("// ----- IR after dropout-mode (main) -----\nmodel main {");
  CHECK(dropout == 0);
  size_t differentiated = text.find("// ----- IR after differentiate (main) -----\nmodel main {");
  CHECK(differentiated > dropout);
  CHECK(differentiated != std::string::npos);
  CHECK(text.find("// ----- IR before fuse (main) -----\nmodel main {") > differentiated);
  CHECK(text.find("// ----- IR after fuse (main) -----") != std::string::npos);
  CHECK(text.find("// ----- IR after order (main) -----") != std::string::npos);
  CHECK(text.find("IR before order") == std::string::npos);
}

TEST_CASE("pass lists and print names are checked against the registry", "[passes]") {
  std::vector<ir::PassInfo> passes;
  CHECK(ir::parsePassList("fuse,order,plan-memory", passes).empty());
  CHECK(passes.size() == 3);
  CHECK(ir::parsePassList("fuse,unroll", passes) == "unknown pass 'unroll' (passes: dropout-mode, differentiate, recompute, fuse-attention, prepack-weights, fuse, order, plan-memory)");
  ir::PassOptions options;
  options.printAfter = {"all", "order"};
  CHECK(ir::checkPrintNames(options).empty());
  options.printBefore = {"fusion"};
  CHECK(ir::checkPrintNames(options) == "unknown pass 'fusion' for --print-before (passes: dropout-mode, differentiate, recompute, fuse-attention, prepack-weights, fuse, order, plan-memory, or all)");
}
