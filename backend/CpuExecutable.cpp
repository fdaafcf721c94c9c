// Compiling a model's ops for the CPU and running them under the interpreter's control flow.
#include "backend/CpuExecutable.h"

#include "backend/llvm/CpuBackend.h"
#include "backend/lower/Lower.h"
#include "runtime/CpuDevice.h"

namespace dnnc::backend {

std::unique_ptr<rt::Executable> compileForCpu(const ir::Graph &g, bool memoryPlan) {
  lower::LoweredGraph lowered = lower::lowerGraph(g);
  std::shared_ptr<CpuModule> module = CpuModule::compile(lowered.kernelPointers());
  auto device = std::make_unique<rt::CpuDevice>(module->lookup(lowered.kernelPointers()), module);
  return lower::executable(g, lowered, lowered.kernelInfos(), std::move(device), memoryPlan);
}

} // namespace dnnc::backend
