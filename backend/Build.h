// `dnnc build`: a model compiled ahead of time into an artifact (runtime/Artifact.h) that
// the runtime loads with no compiler present.
#pragma once

#include "ir/graph/Graph.h"

#include <string>

namespace dnnc::backend {

// target "cpu" (this host's CPU: a shared object linked by the system's C compiler driver)
// or "cuda" (PTX for `arch`). Throws DataError for user errors (no linker, bad arch);
// writes nothing unless everything succeeded.
void buildArtifact(const ir::Graph &g, const std::string &target, const std::string &arch, const std::string &path,
                   bool memoryPlan = true);

} // namespace dnnc::backend
