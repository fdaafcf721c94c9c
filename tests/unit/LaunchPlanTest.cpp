// Per-binding launch plans (runtime/LaunchPlan.h): a call at input shapes seen before
// reuses its plan, one past the cache's capacity evicts the least recently used, and
// whatever the run binds itself (EDO results) is still evaluated at each call. Every
// result is checked against the reference interpreter.
#include "backend/Compile.h"
#include "frontend/Sema.h"
#include "ir/interp/Interpreter.h"
#include "runtime/Executable.h"

#include <catch2/catch.hpp>

#include <random>

using namespace dnnc;

namespace {

// A loop over param views, a GEMM with an epilogue and a softmax: every dim is an input's.
const char *kStatic = R"(dim B; dim T in 1..64;
param w: f32[2, 8, 8];
model main(x: f32[B, T, 8]) -> f32[B, T, 8] {
  var h = x;
  for l in 0..2 {
    h = softmax(tanh(h @ w[l]) + 1.0, axis = -1);
  }
  return h;
}
)";

// A data-dependent size: M changes from call to call at one input shape.
const char *kEdo = R"(dim A;
model main(x: f32[A]) -> f32[M] {
  let kept: f32[M] = masked_select(x, x > 0.0);
  return exp(kept) * 2.0 + sum(x);
}
)";

struct Model {
  Program program;
  ir::Graph *graph = nullptr;
  std::unique_ptr<rt::Executable> exe;
  std::map<std::string, rt::Tensor> params;
};

std::unique_ptr<Model> compile(const char *text, const std::string &target, std::mt19937 &rng) {
  auto m = std::make_unique<Model>();
  DiagnosticEngine diags(m->program.sources());
  REQUIRE(m->program.loadText("plan.dnn", text, diags));
  m->graph = m->program.models().at(0).graph.get();
  m->exe = backend::compile(*m->graph, *backend::findTarget(target), backend::CompileOptions{});
  std::normal_distribution<double> normal;
  for (const ir::Op *op : m->graph->body.ops)
    if (op->kind == ir::OpKind::Param) {
      rt::Tensor t = rt::Tensor::zeros(DType::F32, {2, 8, 8});
      for (size_t k = 0; k < t.numel(); ++k)
        t.set(k, normal(rng));
      m->params.emplace(op->get<std::string>("name"), std::move(t));
    }
  return m;
}

rt::Tensor random(std::vector<int64_t> shape, std::mt19937 &rng) {
  std::normal_distribution<double> normal;
  rt::Tensor t = rt::Tensor::zeros(DType::F32, std::move(shape));
  for (size_t k = 0; k < t.numel(); ++k)
    t.set(k, normal(rng));
  return t;
}

// Runs `m` on `x` and checks the result against the reference interpreter's.
void checkRun(Model &m, const rt::Tensor &x) {
  std::vector<rt::Tensor> got = m.exe->run({x}, m.params);
  std::vector<rt::Tensor> want = interp::Interpreter(*m.graph).run({x}, m.params);
  REQUIRE(got.at(0).shape == want.at(0).shape);
  for (size_t k = 0; k < want[0].numel(); ++k)
    REQUIRE(got[0].get(k) == Approx(want[0].get(k)).epsilon(1e-4).margin(1e-5));
}

} // namespace

TEST_CASE("a launch plan is reused at input shapes seen before, and evicted past its capacity", "[plan]") {
  for (std::string target : {"cpu", "cuda-sim"}) {
    std::mt19937 rng(7);
    auto m = compile(kStatic, target, rng);
    checkRun(*m, random({2, 5, 8}, rng));
    checkRun(*m, random({1, 3, 8}, rng));
    CHECK(m->exe->plannedRuns() == 0);
    checkRun(*m, random({2, 5, 8}, rng)); // new values, the first shape's plan
    checkRun(*m, random({1, 3, 8}, rng));
    CHECK(m->exe->plannedRuns() == 2);
    CHECK(m->exe->launchPlans() == 2);
    if (target == "cuda-sim")
      continue; // the simulator is slow; the rest is the executor's alone
    for (int64_t t = 10; t < 10 + static_cast<int64_t>(rt::LaunchPlanCache::kCapacity); ++t)
      checkRun(*m, random({1, t, 8}, rng));
    CHECK(m->exe->launchPlans() == rt::LaunchPlanCache::kCapacity);
    size_t planned = m->exe->plannedRuns();
    checkRun(*m, random({2, 5, 8}, rng)); // evicted: planned again
    CHECK(m->exe->plannedRuns() == planned);
    checkRun(*m, random({1, 17, 8}, rng)); // the most recent is kept
    CHECK(m->exe->plannedRuns() == planned + 1);
  }
}

TEST_CASE("dims a run binds itself are evaluated at every call, with a plan", "[plan]") {
  std::mt19937 rng(11);
  auto m = compile(kEdo, "cpu", rng);
  for (int call = 0; call < 4; ++call) // M differs at one input shape
    checkRun(*m, random({33}, rng));
  CHECK(m->exe->plannedRuns() == 3);
}

TEST_CASE("a binding that fails its checks fails at every call", "[plan]") {
  std::mt19937 rng(13);
  auto m = compile(kStatic, "cpu", rng);
  for (int call = 0; call < 2; ++call)
    CHECK_THROWS_WITH(m->exe->run({random({1, 65, 8}, rng)}, m->params),
                      "input 'x' (f32[1, 65, 8], axis 1): dim T = 65 is outside its range 1..64");
  CHECK(m->exe->launchPlans() == 0);
}

// The executor's memory trace (Executable::setMemoryTracing, what `dnnc profile` measures):
// each executed op's reads and results, every result's bytes those of its type at the
// run's binding, param views placed as views, planned intermediates in the arena (never
// past the bytes the runtime allocated), EDO results and outputs allocated on their own,
// and a loop's carried values, which the executor copies, charged to the loop (the entry
// reads the loop's operands; each later copy is a step's, over the same buffers, reading
// the body's yields).
TEST_CASE("the memory trace records each result's bytes and where they went", "[plan]") {
  std::mt19937 rng(17);
  for (std::string target : {"cpu", "cuda-sim"}) {
    auto m = compile(kStatic, target, rng);
    m->exe->setMemoryTracing(true);
    checkRun(*m, random({2, 5, 8}, rng));
    const rt::Executable::MemoryTrace &trace = m->exe->memoryTrace();
    REQUIRE(!trace.events.empty());
    size_t views = 0, arena = 0, copies = 0;
    for (const rt::Executable::MemoryEvent &e : trace.events) {
      if (e.op->kind == ir::OpKind::For) { // the carried h, copied at entry and after each iteration
        ++copies;
        CHECK(e.loopStep == (copies > 1)); // after a step: over the entry's buffer
        // The entry reads the loop's operands, a step the body's yields (which it copies).
        CHECK(e.reads.size() == (e.loopStep ? e.op->regions.at(0)->yields.size() : e.op->operands.size()));
        CHECK(e.readData.size() == e.reads.size());
        CHECK(e.made.size() == 1);
        CHECK(e.made.at(0).where == rt::Executable::Placement::Allocated);
      } else {
        CHECK(e.reads.size() == e.op->operands.size());
        CHECK(e.readData.size() == e.reads.size());
      }
      for (const auto &made : e.made) {
        CHECK(made.bytes == *sym::evaluate(made.value->type.bytes(), m->exe->binding()));
        views += made.where == rt::Executable::Placement::View;
        arena += made.where == rt::Executable::Placement::Arena;
        CHECK((made.where == rt::Executable::Placement::View) == rt::isParamView(*e.op));
      }
    }
    CHECK(views == 2); // w[l], once per iteration
    CHECK(copies == 3);
    CHECK(arena > 0);
    CHECK(trace.arenaHighWater > 0);
    CHECK(trace.arenaHighWater <= m->exe->arenaBytes());
    size_t events = trace.events.size();
    m->exe->setMemoryTracing(true); // from empty again
    CHECK(m->exe->memoryTrace().events.empty());
    checkRun(*m, random({1, 3, 8}, rng));
    CHECK(m->exe->memoryTrace().events.size() == events); // the same ops at another binding
    m->exe->setMemoryTracing(false);
    checkRun(*m, random({1, 3, 8}, rng));
    CHECK(m->exe->memoryTrace().events.empty());
  }
  auto m = compile(kEdo, "cpu", rng);
  m->exe->setMemoryTracing(true);
  checkRun(*m, random({33}, rng));
  int64_t m_ = m->exe->binding().at("M");
  int64_t selected = 0;
  for (const rt::Executable::MemoryEvent &e : m->exe->memoryTrace().events)
    for (const auto &made : e.made)
      if (e.op->kind == ir::OpKind::MaskedSelect) {
        CHECK(made.where == rt::Executable::Placement::Allocated);
        selected += made.bytes;
      }
  CHECK(selected == 4 * m_);
  CHECK(m->exe->memoryTrace().allocatedBytes >= 4 * m_);
}

// Loop paths (Executable.h): on the CPU the loop over param views at the counter runs its
// second step compiled, with the same results; a device with memory of its own and a
// memory trace keep it walked, and say why.
TEST_CASE("a planned for loop runs compiled on the CPU after its first step", "[plan]") {
  std::mt19937 rng(19);
  for (std::string target : {"cpu", "cuda-sim"}) {
    auto m = compile(kStatic, target, rng);
    for (int call = 0; call < 2; ++call) { // the second call with the plan made
      checkRun(*m, random({3, 5, 8}, rng));
      const std::vector<rt::Executable::LoopTime> &paths = m->exe->loopPaths();
      REQUIRE(paths.size() == 1);
      CHECK(paths[0].op->kind == ir::OpKind::For);
      CHECK(paths[0].runs == 1);
      CHECK(paths[0].steps == 2);
      CHECK(paths[0].compiled() == (target == "cpu"));
      if (target == "cpu")
        CHECK(paths[0].launches > 0);
      else
        CHECK(paths[0].why == "the device keeps memory of its own");
    }
  }
  auto m = compile(kStatic, "cpu", rng);
  m->exe->setMemoryTracing(true);
  checkRun(*m, random({1, 3, 8}, rng));
  REQUIRE(m->exe->loopPaths().size() == 1);
  CHECK(m->exe->loopPaths()[0].why == "the memory trace follows the walk");
  m->exe->setMemoryTracing(false);
  checkRun(*m, random({1, 3, 8}, rng));
  CHECK(m->exe->loopPaths().at(0).compiled());
}
