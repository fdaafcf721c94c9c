// The ops the runtime runs on the host, by name: those whose result sizes come from
// values (ISVDOS: a shape read from a tensor) or from the run itself (EDO: nonzero,
// masked_select, unique, topk with a run-time k), and the scalar ops that feed them. A
// kernel cannot size its own result, so the executor runs these between launches (a
// sync point) and binds the dims their results fix. Written apart from the reference
// interpreter (ir/interp), which checks them.
#pragma once

#include "base/Tensor.h"
#include "ir/graph/Binding.h"
#include "ir/graph/Graph.h"

#include <vector>

namespace dnnc::rt {

struct HostOpContext {
  const ir::Op &op;
  const std::vector<const Tensor *> &in;
  const ir::Binding &binding;
  // The executor hands over the first operand's memory: nothing reads it after the op (a
  // loop's carried value that the op updates, as a training step's stash row or gradient
  // sum). index_add then writes its result there and returns a view of it.
  bool updatesFirst = false;
};
using HostOpFn = std::vector<Tensor> (*)(const HostOpContext &c);

struct HostOp {
  ir::OpKind kind;
  const char *name; // what `--stats` and errors call it
  HostOpFn run;
};

// The table; null when `kind` has no host implementation (a kernel or the executor's
// own structure runs it).
const HostOp *findHostOp(ir::OpKind kind);
const std::vector<HostOp> &hostOps();

} // namespace dnnc::rt
