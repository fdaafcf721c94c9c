// Compiling a model for the CUDA device and its simulator (see CudaExecutable.h).
#include "backend/CudaExecutable.h"

#include "backend/llvm/CpuBackend.h"
#include "backend/llvm/NvptxBackend.h"
#include "backend/lower/Lower.h"
#include "runtime/GpuSimulator.h"

#include <fmt/format.h>

#include <algorithm>

namespace dnnc::backend {

std::string archFor(const rt::CudaProbe &probe) {
  const auto &archs = supportedArchs();
  if (std::find(archs.begin(), archs.end(), probe.arch()) != archs.end())
    return probe.arch();
  if (probe.major >= 9)
    return "sm_90";
  throw DataError(fmt::format("GPU '{}' is {}; dnnc's PTX needs sm_80 or newer", probe.name, probe.arch()));
}

std::unique_ptr<rt::Executable> compileForCuda(const ir::Graph &g, const std::string &arch, bool memoryPlan) {
  lower::LoweredGraph lowered = lower::lowerGraph(g, lower::kGpuSchedule);
  std::vector<rt::KernelInfo> infos = lowered.kernelInfos();
  PtxModule ptx = compilePtx(lowered.kernelPointers(), arch);
  auto device = std::make_unique<rt::CudaDevice>(ptx.ptx, infos);
  return lower::executable(g, lowered, std::move(infos), std::move(device), memoryPlan);
}

std::unique_ptr<rt::Executable> compileForSimulatedGpu(const ir::Graph &g, bool memoryPlan) {
  lower::LoweredGraph lowered = lower::lowerGraph(g, lower::kGpuSchedule);
  std::shared_ptr<CpuModule> module = CpuModule::compile(lowered.kernelPointers(), true);
  auto device = std::make_unique<rt::SimulatedGpuDevice>(module->lookup(lowered.kernelPointers()), module);
  return lower::executable(g, lowered, lowered.kernelInfos(), std::move(device), memoryPlan);
}

} // namespace dnnc::backend
