// The graph optimization pipeline every compile path runs (dnnc run, build, emit, and the
// REPL's :mem): fusion, then execution-order planning. Memory planning follows at
// lowering, over the order this leaves.
#pragma once

#include "ir/graph/Graph.h"

namespace dnnc::ir {

struct PipelineOptions {
  bool fuse = true;    // --no-fuse turns it off
  bool reorder = true; // execution-order planning
};

void optimize(Graph &g, const PipelineOptions &options = {});

} // namespace dnnc::ir
