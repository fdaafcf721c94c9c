// The memory planner on random programs: at random bindings no two buffers that are live
// at once overlap (except an elementwise result sharing the operand that dies there),
// every buffer fits in the arena, and every use of a value lies inside its lifetime.
#include "backend/Compile.h"
#include "frontend/Sema.h"
#include "ir/transforms/ExecutionOrder.h"
#include "ir/transforms/Fusion.h"
#include "ir/transforms/MemoryPlan.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <random>

using namespace dnnc;

namespace {

// A random straight-line model over f32[B, T, 8] values, with matmuls, reductions,
// broadcasts, unary and binary ops, and sometimes a loop.
std::string randomProgram(std::mt19937 &rng) {
  std::vector<std::pair<std::string, int>> values{{"x", 8}}; // name, last dim
  std::string body;
  auto pick = [&](int width) -> std::string {
    std::vector<std::string> fit;
    for (auto &[n, w] : values)
      if (w == width)
        fit.push_back(n);
    return fit[rng() % fit.size()];
  };
  int steps = 4 + static_cast<int>(rng() % 14);
  for (int k = 0; k < steps; ++k) {
    std::string name = fmt::format("v{}", k), expr;
    int width = 8;
    switch (rng() % 7) {
    case 0: expr = fmt::format("relu({})", pick(8)); break;
    case 1: expr = fmt::format("{} + {}", pick(8), pick(8)); break;
    case 2: expr = fmt::format("{} @ w1", pick(8)), width = 16; break;
    case 3:
      if (std::none_of(values.begin(), values.end(), [](auto &v) { return v.second == 16; }))
        continue;
      expr = fmt::format("tanh({} @ w2)", pick(16));
      break;
    case 4: expr = fmt::format("{} - mean({}, axis = -1, keepdims = true)", pick(8), pick(8)); break;
    case 5: expr = fmt::format("softmax({} * {})", pick(8), pick(8)); break;
    default: expr = fmt::format("exp(transpose({}, [0, 1, 2]))", pick(8)); break;
    }
    body += fmt::format("  let {} = {};\n", name, expr);
    values.push_back({name, width});
  }
  std::string loop;
  if (rng() % 2)
    loop = fmt::format("  var acc = {};\n  for i in 0..3 {{\n    acc = relu(acc @ w3) + {};\n  }}\n", pick(8), pick(8));
  else
    loop = fmt::format("  var acc = {};\n", pick(8));
  return "dim B; dim T in 1..64;\nparam w1: f32[8, 16];\nparam w2: f32[16, 8];\nparam w3: f32[8, 8];\n"
         "model main(x: f32[B, T, 8]) -> f32[B, T, 8] {\n" +
         body + loop + fmt::format("  return acc + {};\n}}\n", pick(8));
}

} // namespace

TEST_CASE("planned buffers never overlap while both are live", "[plan]") {
  std::mt19937 rng(20261203);
  for (int trial = 0; trial < 60; ++trial) {
    std::string text = randomProgram(rng);
    INFO(text);
    Program p;
    DiagnosticEngine diags(p.sources());
    REQUIRE(p.loadText("random.dnn", text, diags));
    ir::Graph &g = *p.models().at(0).graph;
    // Half the trials plan the optimized graph: fused, then reordered (never for the worse).
    if (trial % 2) {
      ir::fuseAll(g);
      ir::OrderStats order = ir::planExecutionOrder(g);
      CHECK(order.peakAfter <= order.peakBefore);
    }
    backend::CompileOptions planOnly; // the graph as it stands: lowered and planned
    planOnly.passes.fuse = planOnly.passes.reorder = false;
    ir::MemoryPlan plan = *backend::lowerFor(g, *backend::findTarget("cpu"), planOnly).plan;
    if (plan.buffers.empty()) // everything fused into the output
      continue;
    // Every use lies inside the lifetime of what it uses.
    std::map<const ir::Op *, int> position;
    for (size_t k = 0; k < plan.order.size(); ++k)
      position[plan.order[k]] = static_cast<int>(k);
    for (const ir::Op *op : plan.order)
      for (const ir::Value *v : op->operands)
        if (const ir::PlannedBuffer *b = plan.find(v)) {
          CHECK(b->first <= position[op]);
          CHECK(position[op] <= b->last);
        }
    for (int binding = 0; binding < 5; ++binding) {
      std::map<std::string, int64_t> dims{{"B", 1 + static_cast<int64_t>(rng() % 9)}, {"T", 1 + static_cast<int64_t>(rng() % 64)}};
      int64_t arena = *sym::evaluate(plan.arena, dims);
      CHECK(arena >= plan.liveLowerBound(dims));
      CHECK(arena <= plan.naiveBytes(dims));
      for (size_t i = 0; i < plan.buffers.size(); ++i) {
        const ir::PlannedBuffer &a = plan.buffers[i];
        int64_t aStart = *sym::evaluate(a.offset, dims), aEnd = aStart + *sym::evaluate(a.bytes, dims);
        CHECK(aStart >= 0);
        CHECK(aEnd <= (a.late ? *sym::evaluate(plan.lateArena, dims) : arena));
        for (size_t j = i + 1; j < plan.buffers.size(); ++j) {
          const ir::PlannedBuffer &b = plan.buffers[j];
          if (a.late != b.late) // different arenas
            continue;
          bool liveTogether = !(a.last < b.first || b.last < a.first);
          int64_t bStart = *sym::evaluate(b.offset, dims), bEnd = bStart + *sym::evaluate(b.bytes, dims);
          // The one allowed overlap: an in-place result in exactly the bytes of the operand
          // that dies at its op.
          bool handOver = ((a.last == b.first && b.inPlace) || (b.last == a.first && a.inPlace)) && aStart == bStart;
          if (!liveTogether || handOver)
            continue;
          INFO(fmt::format("{} [{}, {}) and {} [{}, {}) at B={}, T={}", a.value->type.str(), aStart, aEnd, b.value->type.str(),
                           bStart, bEnd, dims["B"], dims["T"]));
          CHECK((aEnd <= bStart || bEnd <= aStart));
        }
      }
    }
  }
}
