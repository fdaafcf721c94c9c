// The compile sequence every path shares (`dnnc run`, `build`, `emit`, `opt`, the REPL's
// :mem, the tests): the default pass pipeline, lowering for a target, memory planning,
// then a device to run on or an artifact to write.
//
// Contract: runs ir::defaultPipeline on `g` in place (the executable and the artifact
// describe the optimized graph), lowers every op that has a kernel with the target's
// schedules, and plans memory (the plan-memory pass) unless options.memoryPlan is off.
// Throws DataError for user errors (no GPU, an unsupported arch, no linker);
// buildArtifact writes nothing unless everything succeeded.
#pragma once

#include "backend/Target.h"
#include "ir/transforms/Pipeline.h"

namespace dnnc::backend {

struct CompileOptions {
  ir::PassOptions passes; // --no-fuse, --verify-each, --print-before/after
  TargetOptions target;   // --arch
  bool memoryPlan = true; // --no-memory-plan: every intermediate allocated on its own
  // Params keep their values from one call to the next, so the target may prepack them
  // (ir/transforms/Prepack.h); a training step, whose params change every call, says no.
  bool constantParams = true;
};

// A graph optimized and lowered: its kernels, and its memory plan unless it was off.
struct Lowered {
  lower::LoweredGraph kernels;
  std::optional<ir::MemoryPlan> plan;
  std::optional<ir::RecomputeReport> recompute; // a training step's (or a grad's) stash decisions
};
Lowered lowerFor(ir::Graph &g, const Target &target, const CompileOptions &options);

// Compiled now, on a new device of `target`; a training step's stash decisions (its
// versions by shape) to `recompute` when given.
std::unique_ptr<rt::Executable> compile(ir::Graph &g, const Target &target, const CompileOptions &options,
                                        ir::RecomputeReport *recompute = nullptr);
// How many kernels compile() has compiled in this process, all calls together: what
// `dnnc train --verbose` reads before and after its steps to show that no batch shape
// compiled anything again.
size_t kernelsCompiled();
// `dnnc build`: compiled into an artifact (runtime/Artifact.h) at `path`.
void buildArtifact(ir::Graph &g, const Target &target, const CompileOptions &options, const std::string &path);

// For running passes by hand (`dnnc opt`): a state in which plan-memory plans the results
// of the ops that lowering for `target` makes kernels of.
ir::PassState passStateFor(const Target &target);

} // namespace dnnc::backend
