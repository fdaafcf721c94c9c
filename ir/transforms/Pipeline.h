// The pipelines every compile path runs (backend/Compile.h, `dnnc opt` by default): the
// graph passes before lowering, and the one that needs to know what lowering made.
#pragma once

#include "ir/transforms/PassManager.h"

namespace dnnc::ir {

// Before lowering, under options.fuse / options.reorder.
std::vector<PassInfo> defaultPipeline(const PassOptions &options);
// After lowering: memory planning, which plans the results of the ops that became kernels.
std::vector<PassInfo> loweredPipeline();

// Runs defaultPipeline(options) on `g` (for the paths that stop before lowering).
void optimize(Graph &g, const PassOptions &options = {});

} // namespace dnnc::ir
