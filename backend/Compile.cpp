// The compile sequence (see Compile.h).
#include "backend/Compile.h"

#include <atomic>
#include <unordered_set>

namespace dnnc::backend {
namespace {

std::atomic<size_t> compiledKernels{0};

// The plan in the runtime's terms: offsets by value, the late arena's members.
rt::ArenaPlan arenaPlan(const ir::MemoryPlan &plan) {
  rt::ArenaPlan out;
  out.bytes = plan.arena;
  for (const ir::PlannedBuffer &b : plan.buffers) {
    out.offsets[b.value] = b.offset;
    if (b.late)
      out.late.insert(b.value);
    if (b.kept)
      out.kept.insert(b.value);
  }
  out.lateBytes = plan.lateArena;
  return out;
}

// Ops' results get planned buffers when the ops became kernels.
std::function<bool(const ir::Op &)> madeKernels(const lower::LoweredGraph &lowered) {
  auto made = std::make_shared<std::unordered_set<const ir::Op *>>(lowered.ops.begin(), lowered.ops.end());
  return [made](const ir::Op &op) { return made->count(&op) != 0; };
}

} // namespace

Lowered lowerFor(ir::Graph &g, const Target &target, const CompileOptions &options) {
  ir::PassOptions passOptions = options.passes;
  passOptions.prepack = options.constantParams && target.schedule().packedWeights;
  passOptions.attention = options.passes.attention && target.schedule().fusedAttention;
  passOptions.convEpilogues = target.schedule().implicitGemmConv2d;
  ir::PassManager passes(passOptions);
  ir::PassState state;
  passes.run(g, ir::defaultPipeline(passOptions), state);
  Lowered out{lower::lowerGraph(g, target.schedule()), std::nullopt, std::move(state.recompute)};
  if (options.memoryPlan) {
    state.kernelOps = [&](const ir::Graph &) { return madeKernels(out.kernels); }; // just lowered
    passes.run(g, ir::loweredPipeline(), state);
    out.plan = std::move(state.memoryPlan);
  }
  return out;
}

Compiled compileWithPlan(ir::Graph &g, const Target &target, const CompileOptions &options) {
  Lowered lowered = lowerFor(g, target, options);
  compiledKernels += lowered.kernels.kernelInfos().size();
  auto exe = std::make_unique<rt::Executable>(g, lowered.kernels.kernelOf(), lowered.kernels.kernelInfos(),
                                              target.makeDevice(lowered.kernels, options.target));
  if (lowered.plan)
    exe->setArenaPlan(arenaPlan(*lowered.plan));
  exe->setParamsChangeEveryRun(!options.constantParams);
  return Compiled{std::move(exe), std::move(lowered.plan), std::move(lowered.recompute)};
}

std::unique_ptr<rt::Executable> compile(ir::Graph &g, const Target &target, const CompileOptions &options,
                                        ir::RecomputeReport *recompute) {
  Compiled c = compileWithPlan(g, target, options);
  if (recompute && c.recompute)
    *recompute = std::move(*c.recompute);
  return std::move(c.exe);
}

size_t kernelsCompiled() { return compiledKernels.load(); }

void buildArtifact(ir::Graph &g, const Target &target, const CompileOptions &options, const std::string &path) {
  Lowered lowered = lowerFor(g, target, options);
  rt::ArtifactInfo info;
  info.target = target.name();
  std::string payload = target.artifactPayload(lowered.kernels.kernelPointers(), options.target, info);
  rt::writeArtifact(path, g, lowered.kernels.kernelOf(), lowered.kernels.kernelInfos(),
                    lowered.plan ? arenaPlan(*lowered.plan) : rt::ArenaPlan{}, info, payload);
}

ir::PassState passStateFor(const Target &target) {
  ir::PassState state;
  state.kernelOps = [&target](const ir::Graph &g) { return madeKernels(lower::lowerGraph(g, target.schedule())); };
  return state;
}

} // namespace dnnc::backend
