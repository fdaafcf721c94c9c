// The CUDA device, on the driver API. libcuda.so.1 is opened at run time, so dnnc builds
// and runs on machines without a GPU; there, opening the device fails with a clear
// message instead of a crash. Kernels come as one PTX module (the driver JIT-compiles it
// for the GPU at hand); each launch runs a kernel over the grid its plan gives, on the
// device's stream, with operands and results in device memory (rt::DeviceMirror: results
// stay on the GPU until the host reads them, params are uploaded once per run).
#pragma once

#include "runtime/Executable.h"

#include <memory>
#include <string>

namespace dnnc::rt {

// What the machine's CUDA driver reports, or why there is none.
struct CudaProbe {
  bool ok = false;
  std::string error;   // why not, when !ok
  std::string name;    // the GPU's name
  int major = 0, minor = 0; // compute capability
  std::string arch() const { return "sm_" + std::to_string(major) + std::to_string(minor); }
};
CudaProbe probeCuda();

class CudaDevice : public Device {
public:
  // Loads `ptx` and looks up every kernel by name. Throws DataError when there is no
  // usable GPU or the driver rejects the module.
  CudaDevice(const std::string &ptx, const std::vector<KernelInfo> &kernels);
  ~CudaDevice() override;
  std::string name() const override;
  void launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
              const Launch &launch) override;
  void beginRun(const std::vector<const Tensor *> &params, std::vector<Range> arenas) override;
  void hostReads(const std::vector<const Tensor *> &tensors, bool hostMayAllocate) override;
  void setArenas(std::vector<Range> arenas) override;
  void setResident(std::vector<Range> ranges) override;
  void paramsChanged() override;
  std::string copies() const override;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace dnnc::rt
