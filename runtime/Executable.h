// A compiled model at run time: the executor walks the graph on the host (control flow,
// dim binding, EDO sync points, the host ops of runtime/HostOps.h) and launches every
// op that has a kernel on a device after checking what the kernel cannot check itself.
// Usable without the compiler: an artifact from `dnnc build` loads into one. It does not
// use the reference interpreter, which stays the tests' independent oracle.
#pragma once

#include "base/Tensor.h"
#include "ir/graph/Binding.h"
#include "runtime/GemmSelect.h"
#include "runtime/LaunchPlan.h"

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
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
  // A CPU GEMM kernel with shape-generic variants (runtime/GemmSelect.h): the matmul's
  // M, N and K and its number of products, from which launchFor picks the variant and
  // binds its dims, and how it reads B. Null otherwise.
  sym::ExprRef gemmM = nullptr, gemmN = nullptr, gemmK = nullptr, gemmBatches = nullptr;
  GemmB gemmB = GemmB::Rows;
  // A GPU kernel whose code an earlier kernel has: that kernel's PTX entry, which it
  // launches ("" where it has an entry of its own).
  std::string entry;
};

// A kernel's launch under `b` (every dim it names bound). Throws DataError when a size
// overflows 64 bits.
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
  // Host memory whose device copy is the newest between runs (what Executable::runInPlace
  // updates): kept on the device across runs, read back only by hostReads.
  virtual void setResident(std::vector<Range> ranges) { (void)ranges; }
  // The params have new values: copies of them kept between runs are stale.
  virtual void paramsChanged() {}
  // Copies between host and device memory so far, for --stats (empty: none are made).
  virtual std::string copies() const { return {}; }
  // Whether kernels read and write the host's memory itself (no copies of their own to
  // keep up to date): the executor's compiled loops copy carried values on the host.
  virtual bool hostMemory() const { return false; }
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

// Whether `op` takes whole rows of a param, or of a param's prepacked copy, at leading
// point indices (`w[l]`, `w[l, 0]`): contiguous bytes of memory that lives through the
// call, which the runtime passes on as a view instead of copying (so the compiler makes no
// kernel or buffer for it).
bool isParamView(const ir::Op &op);

class Walk;

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
  void setArenaPlan(ArenaPlan plan) {
    arenaPlan_ = std::move(plan);
    plans_.clear();
    packedFrom_.clear();
  }
  const ArenaPlan &arenaPlan() const { return arenaPlan_; }
  // Prepacked weights, and a GPU's copies of params, are reused while a param's memory
  // stays the same (params are constants); a caller that loads new values, perhaps into
  // memory a freed param had, says so here and the next run packs (uploads) them again.
  void paramsChanged() {
    packedFrom_.clear();
    device_->paramsChanged();
  }
  // The params are new values every run (a training step's: the last step's updates,
  // moved into memory another step's executable may have freed): nothing of them is kept
  // between runs but what runInPlace keeps resident.
  void setParamsChangeEveryRun(bool vary) { paramsChangeEveryRun_ = vary; }
  // Binds the inputs' dims and checks the binding (ir/graph/Binding.h), sizes the arena
  // for them (reusing the previous call's memory when it is big enough), and runs the
  // model. Throws DataError for bad inputs, a violated assert or a size that cannot be.
  std::vector<Tensor> run(const std::vector<Tensor> &inputs, const std::map<std::string, Tensor> &params,
                          const ir::Binding &preset = {});
  // As run(), but with the outputs in the caller's memory, kept from one call to the
  // next: an update (Graph::updates, those ir::safeUpdates keeps) is written over its
  // param in `params` or its input in `inputs`, in place; every other output k into
  // `outputs[k]`, which is made anew only when its shape changed. So a second call at
  // the same shapes allocates no output. On a device with memory of its own the updated
  // params and inputs stay there between calls (uploaded once, never downloaded) until
  // syncToHost(); the caller must not change them on the host meanwhile.
  void runInPlace(std::vector<Tensor> &inputs, std::map<std::string, Tensor> &params, std::vector<Tensor> &outputs,
                  const ir::Binding &preset = {});
  // Brings the host's copies of `tensors` (params and inputs runInPlace updated) up to date.
  void syncToHost(const std::vector<const Tensor *> &tensors);
  // Brings back everything runInPlace left on the device and forgets it there: before
  // another executable (a training step's other recompute version) updates the same
  // memory, so that this one's device copies are not taken for the newest next time.
  void releaseResident();
  // The updates runInPlace writes in place (the graph's, as far as its order makes them safe).
  const std::vector<ir::Graph::Update> &updates() const { return updates_; }
  // Buffers the last call allocated for the model's outputs: those it made with memory
  // of their own, and the copies run() returns (runInPlace: the output slots it remade).
  size_t outputAllocations() const { return outputAllocations_; }
  // The arena bytes the last call used (0 without a plan), and those of the late arena
  // (-1 when the call made no late value).
  int64_t arenaBytes() const { return arenaBytes_; }
  int64_t lateArenaBytes() const { return lateArenaBytes_; }
  size_t kernelsLaunched() const { return launched_; } // over every run so far
  // The dims the last run bound, and the ops it executed (kernels, host ops, structure).
  const ir::Binding &binding() const { return binding_; }
  size_t opsExecuted() const { return opsExecuted_; }
  // Launch plans (LaunchPlan.h) held, and the runs that found theirs made already.
  size_t launchPlans() const { return plans_.size(); }
  size_t plannedRuns() const { return plannedRuns_; }

  // The profiler: while it is on, each kernel launch and host op is timed (every device
  // returns from launch() once the kernel has run), and each kernel's FLOPs and bytes
  // read and written are counted. `seconds` is the runs' own time, end to end.
  struct OpTime {
    const ir::Op *op = nullptr;
    std::string name; // the kernel's, or the host op's
    bool kernel = false;
    size_t calls = 0;
    double seconds = 0, flops = 0, bytes = 0;
    std::vector<int> gemmVariants; // a CPU GEMM's variants its launches used (runtime/GemmSelect.h), distinct
  };
  // How each `for` loop ran (see loop paths below): its body replayed as prepared
  // launches (compiled) or walked op by op, and why.
  struct LoopTime {
    const ir::Op *op = nullptr;
    std::string why; // what kept it interpreted (empty when compiled)
    bool compiled() const { return why.empty(); }
    size_t runs = 0;
    int64_t steps = 0;    // iterations over every run
    size_t launches = 0;  // kernel launches a compiled step replays
  };
  struct Profile {
    std::vector<OpTime> ops; // those that ran, in program order
    std::vector<LoopTime> loops;
    size_t runs = 0;
    double seconds = 0;
  };
  void setProfiling(bool on); // on: counting from zero (again)
  Profile profile() const;

  // Loop paths. A `for` loop's first iteration is walked like any region (it checks and
  // plans every body op); the rest run compiled — each body kernel's launch, operands
  // and results prepared once, then replayed per step with only the counter changing,
  // the carried values copied into buffers of their own — when the body holds only
  // kernels, param views, constants and asserts over the inputs' dims (no other host op,
  // no nested control flow), every run-time index it reads is the counter or fixed
  // through the loop, its every op was planned under the inputs' binding (no dim bound
  // per iteration), no yield is another carried value, the device works in host memory
  // and no memory trace is on. Otherwise the loop is walked op by op, as every while
  // loop is. The last run's paths, in the order the loops finished:
  const std::vector<LoopTime> &loopPaths() const { return loopPaths_; }
  void setCompiledLoops(bool on) { compiledLoops_ = on; } // off: every loop walked (to compare)

  // The memory trace (`dnnc profile`): while it is on, every op the walk executes (kernel,
  // param view or host op; params, control flow and asserts make no memory) records the
  // values it read and the bytes of each result, and where those bytes are: in an arena
  // (at the planned offset), in memory the runtime allocated for that result alone, or a
  // view of memory that exists already (a param view, a host op's alias of its operand).
  // A loop's carried values, which the executor copies at its entry and after each
  // iteration, are recorded as results of the loop op: the entry's event reads the loop's
  // operands and makes the carried buffers; each later one (loopStep) writes the yields
  // over those same buffers, as a compiled loop does (reading the yields), and makes no new memory (the walk's
  // copies are fresh memory each step, and its region arguments and the loop's results
  // copies of their own: a profile follows the carried values by value, not address).
  // These are the runtime's own counts, so a profile can set them beside the plan. While
  // it is on, every loop is walked (no compiled loops, see loop paths).
  enum class Placement { Arena, Allocated, View };
  struct MemoryEvent {
    const ir::Op *op = nullptr;
    std::vector<const ir::Value *> reads;
    std::vector<const uint8_t *> readData; // the memory each read is at (a loop's carried value is its last yield's)
    struct Made {
      const ir::Value *value = nullptr;
      int64_t bytes = 0;
      Placement where = Placement::Allocated;
      const uint8_t *data = nullptr; // to tell a result written over its operand (in place)
    };
    std::vector<Made> made;
    bool loopStep = false; // a loop's copies after an iteration: over the buffers its entry made
  };
  struct MemoryTrace {
    std::vector<MemoryEvent> events; // in execution order, over every run since it was turned on
    int64_t allocatedBytes = 0;      // allocated for single results (Placement::Allocated), added up
    int64_t arenaHighWater = 0;      // the most arena bytes any result reached (offset + bytes)
  };
  void setMemoryTracing(bool on); // on: an empty trace (again)
  const MemoryTrace &memoryTrace() const { return trace_; }

private:
  friend class Walk;
  std::vector<Device::Range> arenas() const; // the host memory only kernels write
  // What the executor knows of an op before any binding.
  struct OpEntry {
    const ir::Op *op;
    int64_t kernel; // its index in kernels_, or -1
    bool view;      // a param view (isParamView)
    bool readsIndices;
  };
  // Kernels and param views; false for the other ops. `p` is the op's entry in the plan.
  bool runOp(size_t index, OpPlan &p, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
             const ir::Binding &b);
  void launch(size_t index, const std::vector<const Tensor *> &in, std::vector<Tensor> &out, const Launch &l, double flops);
  void launchUnlessPacked(size_t index, const std::vector<const Tensor *> &in, std::vector<Tensor> &out, const Launch &l,
                          double flops);
  void record(size_t index, const std::string &name, std::chrono::steady_clock::time_point start, double flops, double bytes);
  LaunchPlan &planFor(const std::vector<Tensor> &inputs, const ir::Binding &preset);
  // One call's walk: binds, runs the body and hands the walk to `finish` for the outputs.
  void walkGraph(const std::vector<Tensor> &inputs, const std::map<std::string, Tensor> &params, const ir::Binding &preset,
                 const std::function<void(Walk &)> &finish);
  Tensor unplanned(const ir::Value *r, std::vector<int64_t> shape);
  void planOp(size_t index, OpPlan &p) const; // Unplanned -> Planned or Dynamic, under plan_'s binding

  std::shared_ptr<const ir::Graph> owned_;
  const ir::Graph *graph_;
  std::map<const ir::Op *, size_t> kernelOf_;
  std::vector<KernelInfo> kernels_;
  std::unique_ptr<Device> device_;
  size_t launched_ = 0;
  ir::Binding binding_;
  size_t opsExecuted_ = 0;
  ArenaPlan arenaPlan_;
  std::unordered_map<const ir::Op *, size_t> opIndex_; // every op, nested ones too
  std::vector<OpEntry> ops_;                           // by index
  LaunchPlanCache plans_;
  LaunchPlan *plan_ = nullptr; // the running call's
  size_t plannedRuns_ = 0;
  bool profiling_ = false;
  bool tracing_ = false;
  MemoryTrace trace_;
  void traceOp(const ir::Op &op, const std::vector<const Tensor *> &in, const std::vector<Tensor> &out, bool view);
  // At the loop's entry (`reads`: the loop op's operands) or after a step (`reads`: the
  // body's yields, which the step copies); `readData` their tensors.
  void traceCopies(const ir::Op &loop, const std::vector<Tensor> &carried, const std::vector<const ir::Value *> &reads,
                   const std::vector<const Tensor *> &readData, bool step);
  std::vector<OpTime> times_; // by op index, while profiling
  std::unordered_map<const ir::Op *, std::string> loopRefusal_; // what the body alone rules out, per for loop
  // Host ops in a loop body that update a carried value in place (HostOpContext::updatesFirst):
  // index_add(arg, ...) whose only reader is the yield of that arg's slot, the arg read by
  // nothing else. The walk then keeps the carried buffer instead of copying it twice a step.
  std::unordered_set<const ir::Op *> updatesCarried_;
  std::vector<LoopTime> loopPaths_;                          // the last run's
  bool compiledLoops_ = true;
  bool paramsChangeEveryRun_ = false;
  std::map<const ir::Op *, LoopTime> loopTimes_;              // while profiling
  void noteLoop(const ir::Op &op, const std::string &why, int64_t steps, size_t launches);
  size_t profiledRuns_ = 0;
  double profiledSeconds_ = 0;
  std::vector<uint8_t> arena_, lateArena_;
  std::map<const ir::Op *, const uint8_t *> packedFrom_; // the param memory each kept prepack was made from
  int64_t arenaBytes_ = 0, lateArenaBytes_ = -1;
  std::set<const ir::Value *> yields_;
  std::vector<ir::Graph::Update> updates_;
  struct Into {
    Tensor *tensor;
    bool update; // the memory of a param or input
  };
  std::unordered_map<const ir::Value *, Into> into_; // runInPlace's outputs, while it runs
  size_t outputAllocations_ = 0;
};

} // namespace dnnc::rt
