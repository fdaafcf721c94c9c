// A simulated GPU: runs kernels compiled with the GPU's work mapping (`--device cuda-sim`)
// on the CPU under the CUDA execution model, so the GPU schedules (grid-stride loops, warp
// shuffles, shared-memory tiles and barriers) are tested where there is no GPU. Like
// Numba's CUDA simulator or Triton's interpreter, it is for correctness, not speed.
//
// Each block runs alone, its threads as coroutines on one OS thread: a thread runs until
// it reaches a barrier or a shuffle, and the simulator resumes the waiting threads once
// every thread of the block (for a barrier) or every lane of the warp (for a shuffle) is
// there. Divergent barriers or shuffles, which are undefined behaviour on a GPU, stop the
// launch with an error instead of hanging. Grids are capped at a few blocks per dimension:
// the kernels loop over the grid, so that is still correct, and it exercises the loops.
#pragma once

#include "runtime/DeviceMirror.h"
#include "runtime/Executable.h"
#include "runtime/KernelAbi.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dnnc::rt {

// Like the CUDA device, it has memory of its own ("device" buffers on the heap, apart
// from the host's tensors) behind a DeviceMirror, so the runtime's keeping results on
// the device between launches is tested too.
class SimulatedGpuDevice : public Device {
public:
  // fns[i] is kernel i, compiled for the simulator; `owner` keeps their code alive.
  SimulatedGpuDevice(std::vector<KernelFn> fns, std::shared_ptr<void> owner);
  ~SimulatedGpuDevice() override;
  std::string name() const override { return "cuda-sim (the GPU schedules, simulated on the CPU)"; }
  void launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
              const Launch &launch) override;
  void beginRun(const std::vector<const Tensor *> &params, std::vector<Range> arenas) override {
    mirror_->beginRun(params, std::move(arenas));
  }
  void hostReads(const std::vector<const Tensor *> &tensors, bool hostMayAllocate) override {
    mirror_->hostReads(tensors, hostMayAllocate);
  }
  void setArenas(std::vector<Range> arenas) override { mirror_->setArenas(std::move(arenas)); }
  void setResident(std::vector<Range> ranges) override { mirror_->setResident(std::move(ranges)); }
  void paramsChanged() override { mirror_->paramsChanged(); }
  std::string copies() const override { return mirror_->copies(); }
  const DeviceMirror &mirror() const { return *mirror_; }

private:
  std::vector<KernelFn> fns_;
  std::shared_ptr<void> owner_;
  std::unique_ptr<DeviceMirror::Memory> memory_;
  std::unique_ptr<DeviceMirror> mirror_;
};

// The hooks simulated kernels call (runtime/KernelAbi.h), by symbol name, for the JIT.
std::vector<std::pair<std::string, void *>> simulatorHooks();

} // namespace dnnc::rt
