// A compiled model at run time: the executor walks the graph on the host (control flow,
// dim binding, EDO sync points, the host ops of runtime/HostOps.h) and launches every
// op that has a kernel on a device after checking what the kernel cannot check itself.
// Usable without the compiler: an artifact from `dnnc build` loads into one. It does not
// use the reference interpreter, which stays the tests' independent oracle.
#pragma once

#include "base/Tensor.h"
#include "ir/graph/Binding.h"

#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

namespace dnnc::rt {

// What the runtime needs to know about one kernel.
struct KernelInfo {
  std::string name;
  std::vector<std::string> dims;          // the dims passed to it, in order
  sym::ExprRef parallelExtent = nullptr;  // its parallel loop's trip count, if it has one
  sym::ExprRef work = nullptr;            // rough cost of one parallel iteration (inner trip counts)
  // Its GPU grid: blocks along x and y (the kernels loop over the grid, so a device may
  // launch fewer) and threads per block.
  sym::ExprRef gridX = nullptr, gridY = nullptr;
  int64_t blockThreads = 256;
};

// One launch of a kernel, evaluated from the binding once, by the runtime.
struct Launch {
  std::vector<int64_t> dims; // the values of KernelInfo::dims
  int64_t extent = 0;        // the parallel loop's trip count (0 without one)
  int64_t work = 1;          // rough cost of one of its iterations
  int64_t gridX = 1, gridY = 1; // GPU blocks wanted along x and y
};
Launch launchFor(const KernelInfo &info, const ir::Binding &b);

// Where kernels run. `in` are the op's operands and `out` its results, allocated with
// their shapes.
class Device {
public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual void launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
                      const Launch &launch) = 0;
  // Devices with memory of their own keep results there between launches (see
  // rt::DeviceMirror, whose calls these are): a run begins with the params it reads and
  // the arenas (host memory only kernels write); the host's copies of `tensors` are
  // brought up to date by hostReads() before the host reads them; setArenas() follows
  // an arena that moved.
  using Range = std::pair<const uint8_t *, size_t>;
  virtual void beginRun(const std::vector<const Tensor *> &params, std::vector<Range> arenas) { (void)params, (void)arenas; }
  virtual void hostReads(const std::vector<const Tensor *> &tensors, bool hostMayAllocate) { (void)tensors, (void)hostMayAllocate; }
  virtual void setArenas(std::vector<Range> arenas) { (void)arenas; }
  // Copies between host and device memory so far, for --stats (empty: none are made).
  virtual std::string copies() const { return {}; }
};

// Where planned intermediates live: one arena of `bytes`, each value at its offset (all
// dim expressions over the model's input dims; see ir/transforms/MemoryPlan.h).
// Values in `late` live in a second arena of `lateBytes`, sized when the first of them is
// made (their sizes need dims an EDO sync point binds).
struct ArenaPlan {
  sym::ExprRef bytes = nullptr;
  std::map<const ir::Value *, sym::ExprRef> offsets;
  sym::ExprRef lateBytes = nullptr;
  std::set<const ir::Value *> late;
  // Prepacked weights: their bytes stay in the arena from one call to the next (they lie
  // below everything else at constant offsets), so each is packed once for its param.
  std::set<const ir::Value *> kept;
};

// Whether `op` takes whole rows of a param at leading point indices (`w[l]`, `w[l, 0]`):
// contiguous bytes of memory that lives through the call, which the runtime passes on as
// a view instead of copying (so the compiler makes no kernel or buffer for it).
bool isParamView(const ir::Op &op);

class Executable {
public:
  // `kernelOf` maps ops of `graph` to their index in `kernels` and on `device`; `owned`
  // keeps the graph alive when the executable owns it (a loaded artifact).
  Executable(const ir::Graph &graph, std::map<const ir::Op *, size_t> kernelOf, std::vector<KernelInfo> kernels,
             std::unique_ptr<Device> device, std::shared_ptr<const ir::Graph> owned = nullptr);
  const ir::Graph &graph() const { return *graph_; }
  Device &device() { return *device_; }
  const std::vector<KernelInfo> &kernels() const { return kernels_; }
  // Intermediates go to the arena from now on (none: each is allocated on its own).
  void setArenaPlan(ArenaPlan plan) { plan_ = std::move(plan), packedFrom_.clear(); }
  const ArenaPlan &arenaPlan() const { return plan_; }
  // Binds the inputs' dims and checks the binding (ir/graph/Binding.h), sizes the arena
  // for them (reusing the previous call's memory when it is big enough), and runs the
  // model. Throws DataError for bad inputs, a violated assert or a size that cannot be.
  std::vector<Tensor> run(const std::vector<Tensor> &inputs, const std::map<std::string, Tensor> &params,
                          const ir::Binding &preset = {});
  // The arena bytes the last call used (0 without a plan), and those of the late arena
  // (-1 when the call made no late value).
  int64_t arenaBytes() const { return arenaBytes_; }
  int64_t lateArenaBytes() const { return lateArenaBytes_; }
  size_t kernelsLaunched() const { return launched_; } // over every run so far
  // The dims the last run bound, and the ops it executed (kernels, host ops, structure).
  const ir::Binding &binding() const { return binding_; }
  size_t opsExecuted() const { return opsExecuted_; }

private:
  friend class Walk;
  std::vector<Device::Range> arenas() const; // the host memory only kernels write
  bool runOp(const ir::Op &op, const std::vector<const Tensor *> &in, std::vector<Tensor> &out, const ir::Binding &b);

  std::shared_ptr<const ir::Graph> owned_;
  const ir::Graph *graph_;
  std::map<const ir::Op *, size_t> kernelOf_;
  std::vector<KernelInfo> kernels_;
  std::unique_ptr<Device> device_;
  size_t launched_ = 0;
  ir::Binding binding_;
  size_t opsExecuted_ = 0;
  ir::BindingCheck bindingCheck_;
  ArenaPlan plan_;
  std::vector<uint8_t> arena_, lateArena_;
  std::map<const ir::Op *, const uint8_t *> packedFrom_; // the param memory each kept prepack was made from
  int64_t arenaBytes_ = 0, lateArenaBytes_ = -1;
};

} // namespace dnnc::rt
