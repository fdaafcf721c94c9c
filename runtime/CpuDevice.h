// The CPU device: calls compiled kernels (from the JIT or a loaded shared object) on host
// tensors, splitting each kernel's parallel loop across the thread pool.
#pragma once

#include "runtime/Executable.h"
#include "runtime/KernelAbi.h"
#include "runtime/ThreadPool.h"

namespace dnnc::rt {

class CpuDevice : public Device {
public:
  // fns[i] is kernel i; `owner` keeps whatever holds their code alive (a JIT, a dlopen handle).
  CpuDevice(std::vector<KernelFn> fns, std::shared_ptr<void> owner, ThreadPool &pool = ThreadPool::global())
      : fns_(std::move(fns)), owner_(std::move(owner)), pool_(pool) {}
  std::string name() const override;
  void launch(size_t kernel, const KernelInfo &info, const std::vector<const Tensor *> &in, std::vector<Tensor> &out,
              const Launch &launch) override;
  bool hostMemory() const override { return true; }

private:
  std::vector<KernelFn> fns_;
  std::shared_ptr<void> owner_;
  ThreadPool &pool_;
};

} // namespace dnnc::rt
