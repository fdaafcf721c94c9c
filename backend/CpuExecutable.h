// A model compiled for the host CPU: one kernel per op that has a static shape, compiled
// by the LLVM back end and run by the runtime's CPU device; value-dependent ops and
// control flow run on the host (the interpreter drives them), which is where EDO sizes
// are read back.
#pragma once

#include "ir/graph/Graph.h"
#include "runtime/Executable.h"

#include <memory>

namespace dnnc::backend {

// memoryPlan: intermediates in one planned arena (else each allocated on its own).
std::unique_ptr<rt::Executable> compileForCpu(const ir::Graph &g, bool memoryPlan = true);

} // namespace dnnc::backend
