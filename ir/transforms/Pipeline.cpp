// The pipelines, as lists with a reason per entry (see Pipeline.h).
#include "ir/transforms/Pipeline.h"

namespace dnnc::ir {

std::vector<PassInfo> defaultPipeline(const PassOptions &options) {
  // Dropout's mode first: whether it drops depends on a grad in the body, which
  // differentiation replaces, and the backward pass copies each dropout's attrs.
  // Differentiation next, always: the backward ops it makes are ordinary ops that every
  // later pass (and the reference interpreter) treats like the forward ones.
  // Recomputation right after it, on the backward spans it made: a forward value the
  // backward pass no longer reads may then fuse (attention, elementwise chains), and each
  // clone stands before its backward consumer, where fusion can fold it in.
  std::vector<PassInfo> passes{passInfo(PassId::DropoutMode), passInfo(PassId::Differentiate), passInfo(PassId::Recompute)};
  // Attention after differentiation (the attention op has no gradient rule: a backward
  // graph reads the probabilities, which keeps those ops unfused) and before anything that
  // would see the scores as separate kernels.
  if (options.attention)
    passes.push_back(passInfo(PassId::FuseAttention));
  // Prepacking before fusion: a GEMM fused with its epilogue then reads the packed copy.
  if (options.prepack)
    passes.push_back(passInfo(PassId::Prepack));
  // Fusion next: it decides which ops become one kernel, so ordering and planning see
  // the kernels that will run (a fused group's intermediates never reach memory).
  if (options.fuse)
    passes.push_back(passInfo(PassId::Fuse));
  // Execution order next: it lowers the peak of live bytes over the fused ops, and the
  // memory planner's lifetimes follow the order it leaves.
  if (options.reorder)
    passes.push_back(passInfo(PassId::Order));
  return passes;
}

std::vector<PassInfo> loweredPipeline() {
  // Memory planning last: only results of ops lowered to kernels get arena space, and
  // lifetimes run over the final order.
  return {passInfo(PassId::PlanMemory)};
}

void optimize(Graph &g, const PassOptions &options) {
  PassState state;
  PassManager(options).run(g, defaultPipeline(options), state);
}

} // namespace dnnc::ir
