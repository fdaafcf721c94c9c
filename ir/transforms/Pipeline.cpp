// The optimization pipeline (see Pipeline.h).
#include "ir/transforms/Pipeline.h"

#include "ir/transforms/ExecutionOrder.h"
#include "ir/transforms/Fusion.h"

namespace dnnc::ir {

void optimize(Graph &g, const PipelineOptions &options) {
  if (options.fuse)
    fuseAll(g);
  if (options.reorder)
    planExecutionOrder(g);
}

} // namespace dnnc::ir
