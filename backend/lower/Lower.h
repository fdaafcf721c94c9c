// Lowering from the graph IR to kernel IR, one op per kernel.
//
// Contract: takes one op whose result shapes are known from input shapes (ISDO/ISDOS,
// every dim a dim expression), returns the kernel computing it, or nullopt for ops the
// runtime runs on the host: structure (params, constants, control flow, asserts), and
// value-dependent ops (ISVDOS/EDO: sizes read back at a sync point, sorting).
// Guarantees: buffers are the op's operands then its results, with their graph types;
// every index is within its buffer's bounds for every binding the types allow, given the
// host checks the runtime makes first (take indices, static point indices).
#pragma once

#include "backend/lower/Schedule.h"
#include "ir/graph/Graph.h"
#include "ir/kernel/Kernel.h"

#include "ir/transforms/MemoryPlan.h"
#include "runtime/Executable.h"

#include <optional>

namespace dnnc::lower {

// schedule: the target's choices (Schedule.h); what the kernel computes is the same for all.
std::optional<kir::Kernel> lowerOp(const ir::Op &op, const std::string &name, const ScheduleOptions &schedule = kCpuSchedule);

// Every op of a graph (all regions, program order) that has a kernel, with its kernel.
struct LoweredGraph {
  std::vector<const ir::Op *> ops;
  std::vector<kir::Kernel> kernels;
  std::map<const ir::Op *, size_t> kernelOf() const;
  std::vector<const kir::Kernel *> kernelPointers() const; // what the back ends compile
  std::vector<rt::KernelInfo> kernelInfos() const;         // what the runtime launches
  // The memory plan of the graph these kernels came from: their results are planned.
  ir::MemoryPlan memoryPlan(const ir::Graph &g) const;
};
LoweredGraph lowerGraph(const ir::Graph &g, const ScheduleOptions &schedule = kCpuSchedule);
// The memory plan of `g` for the kernels in `lowered` (ir/transforms/MemoryPlan.h), in
// the runtime's terms.
rt::ArenaPlan arenaPlan(const ir::Graph &g, const LoweredGraph &lowered);
// The executable that runs `g` with `lowered`'s kernels (described by `infos`) on
// `device`; memoryPlan: intermediates in the planned arena.
std::unique_ptr<rt::Executable> executable(const ir::Graph &g, const LoweredGraph &lowered, std::vector<rt::KernelInfo> infos,
                                           std::unique_ptr<rt::Device> device, bool memoryPlan);
// What the runtime needs to launch `k`: its dim names, parallel extent and work estimate.
rt::KernelInfo kernelInfo(const kir::Kernel &k);

} // namespace dnnc::lower
