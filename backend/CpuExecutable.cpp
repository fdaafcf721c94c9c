// Compiling a model's ops for the CPU and running them under the interpreter's control flow.
#include "backend/CpuExecutable.h"

#include "backend/lower/Lower.h"
#include "runtime/CpuDevice.h"

namespace dnnc::backend {

CpuExecutable::CpuExecutable(const ir::Graph &g, bool memoryPlan) {
  lower::LoweredGraph lowered = lower::lowerGraph(g);
  module_ = CpuModule::compile(lowered.kernelPointers());
  std::vector<rt::KernelFn> fns;
  for (const kir::Kernel &k : lowered.kernels) {
    fns.push_back(module_->lookup(k.name));
    kernelsText_ += kir::print(k);
  }
  exe_ = std::make_unique<rt::Executable>(g, lowered.kernelOf(), lowered.kernelInfos(),
                                          std::make_unique<rt::CpuDevice>(std::move(fns), module_));
  if (memoryPlan)
    exe_->setArenaPlan(lower::arenaPlan(g, lowered));
}

} // namespace dnnc::backend
