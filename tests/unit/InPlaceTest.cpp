// In-place updates (ir/graph/Updates.h) through the compiler and the runtime: an output
// declared the new value of a param is written over it by Executable::runInPlace after
// every other reader of the old value (the execution order's write-after-read edge), with
// no output allocated on a second call; updates that cannot be made safe are dropped and
// come out as ordinary outputs. Each result is checked against run()'s copy-out path, on
// cpu and cuda-sim.
#include "backend/Compile.h"
#include "frontend/Sema.h"
#include "runtime/Executable.h"

#include <catch2/catch.hpp>

using namespace dnnc;

namespace {

struct Model {
  Program program;
  ir::Graph *graph = nullptr;
  std::unique_ptr<rt::Executable> exe;
};

// `text` compiled for `target` with output 1 declared the update of param w.
std::unique_ptr<Model> compile(const char *text, const std::string &target) {
  auto m = std::make_unique<Model>();
  DiagnosticEngine diags(m->program.sources());
  REQUIRE(m->program.loadText("inplace.dnn", text, diags));
  m->graph = m->program.models().at(0).graph.get();
  m->graph->updates = {{1, "w", 0}};
  backend::CompileOptions options;
  options.constantParams = false;
  m->exe = backend::compile(*m->graph, *backend::findTarget(target), options);
  return m;
}

rt::Tensor ramp(std::vector<int64_t> shape, double scale) {
  rt::Tensor t = rt::Tensor::zeros(DType::F32, std::move(shape));
  for (size_t k = 0; k < t.numel(); ++k)
    t.set(k, scale * static_cast<double>(k % 7) - 1.0);
  return t;
}

// Three calls of runInPlace against run() on the same values, each taking the last's w.
void checkAgainstCopies(Model &m, size_t wantUpdates) {
  CHECK(m.exe->updates().size() == wantUpdates);
  std::vector<rt::Tensor> inputs{ramp({3, 8}, 0.25)}, outputs;
  std::map<std::string, rt::Tensor> params{{"w", ramp({8}, 0.5)}}, copied = params;
  const uint8_t *memory = params.at("w").data();
  for (int call = 0; call < 3; ++call) {
    std::vector<rt::Tensor> want = m.exe->run(inputs, copied, {});
    CHECK(m.exe->outputAllocations() >= want.size()); // each output made, then copied out
    copied["w"] = want[1];
    m.exe->runInPlace(inputs, params, outputs, {});
    if (call > 0)
      CHECK(m.exe->outputAllocations() == 0);
    std::vector<const rt::Tensor *> w{&params.at("w")};
    m.exe->syncToHost(w);
    REQUIRE(outputs.size() == want.size());
    CHECK(outputs[0].get(0) == want[0].get(0)); // the loss read the old w
    if (wantUpdates) {
      CHECK(params.at("w").data() == memory); // the same memory, new values
    } else {
      CHECK(outputs[1].numel() == 8); // an ordinary output, which the caller moves in
      params["w"] = outputs[1];
    }
    for (size_t k = 0; k < 8; ++k)
      CHECK(params.at("w").get(k) == want[1].get(k));
  }
}

} // namespace

TEST_CASE("an update is written over its param after the other reader of the old value", "[inplace]") {
  // In program order the update runs first; the loss reads the old w after it.
  const char *text = R"(dim B;
param w: f32[8];
model main(x: f32[B, 8]) -> (f32[], f32[8]) {
  let updated = w * 0.5 + 1.0;
  let loss = sum(x * w);
  return (loss, updated);
}
)";
  for (const char *target : {"cpu", "cuda-sim"}) {
    INFO(target);
    auto m = compile(text, target);
    checkAgainstCopies(*m, 1);
  }
}

TEST_CASE("an update that cannot be made safe comes out as an ordinary output", "[inplace]") {
  // The old w is read by an op that needs the new one (a cycle), or is itself an output.
  const char *cycle = R"(dim B;
param w: f32[8];
model main(x: f32[B, 8]) -> (f32[], f32[8]) {
  let updated = w * 0.5 + 1.0;
  let loss = sum(x * w) + sum(updated * w);
  return (loss, updated);
}
)";
  const char *yielded = R"(dim B;
param w: f32[8];
model main(x: f32[B, 8]) -> (f32[], f32[8], f32[8]) {
  let updated = w * 0.5 + 1.0;
  return (sum(x * w), updated, w);
}
)";
  for (const char *target : {"cpu", "cuda-sim"}) {
    INFO(target);
    auto m = compile(cycle, target);
    CHECK(m->graph->updates.empty()); // dropped by the execution-order pass
    checkAgainstCopies(*m, 0);
    auto y = compile(yielded, target);
    CHECK(y->exe->updates().empty());
  }
}
