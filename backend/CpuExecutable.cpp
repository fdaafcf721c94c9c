// Compiling a model's ops for the CPU and running them under the interpreter's control flow.
#include "backend/CpuExecutable.h"

#include "backend/lower/Lower.h"
#include "runtime/CpuDevice.h"

namespace dnnc::backend {

CpuExecutable::CpuExecutable(const ir::Graph &g, bool memoryPlan) {
  lower::LoweredGraph lowered = lower::lowerGraph(g);
  std::vector<const kir::Kernel *> all;
  std::vector<rt::KernelInfo> infos;
  for (const kir::Kernel &k : lowered.kernels) {
    all.push_back(&k);
    infos.push_back(lower::kernelInfo(k));
    kernelsText_ += kir::print(k);
  }
  module_ = CpuModule::compile(all);
  std::vector<rt::KernelFn> fns;
  for (const kir::Kernel &k : lowered.kernels)
    fns.push_back(module_->lookup(k.name));
  exe_ = std::make_unique<rt::Executable>(g, lowered.kernelOf(), std::move(infos),
                                          std::make_unique<rt::CpuDevice>(std::move(fns), module_));
  if (memoryPlan)
    exe_->setArenaPlan(lower::arenaPlan(g, lowered));
}

} // namespace dnnc::backend
