// A model compiled for an NVIDIA GPU: the same kernels as on the CPU, as one PTX module
// run by the runtime's CUDA device; control flow and host ops stay with the interpreter.
#pragma once

#include "runtime/CudaDevice.h"
#include "runtime/Executable.h"

#include <memory>

namespace dnnc::backend {

// The PTX architecture to build for the GPU that `probe` describes: its own when dnnc
// supports it, sm_90 for newer GPUs (the driver compiles PTX forward). Throws
// DataError for GPUs older than sm_80.
std::string archFor(const rt::CudaProbe &probe);
// Compiles `g` for `arch` and loads it on GPU 0. Throws DataError without a usable GPU.
std::unique_ptr<rt::Executable> compileForCuda(const ir::Graph &g, const std::string &arch, bool memoryPlan = true);
// Compiles `g` with the GPU's work mapping for rt::SimulatedGpuDevice (`--device cuda-sim`).
std::unique_ptr<rt::Executable> compileForSimulatedGpu(const ir::Graph &g, bool memoryPlan = true);

} // namespace dnnc::backend
